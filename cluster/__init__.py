"""Ray cluster bring-up and attach, the per-node reaper, Kubernetes manifests."""
