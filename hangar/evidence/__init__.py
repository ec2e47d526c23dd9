"""The evidence store: each trial's evidence as an archive, its hashes, and where it is kept.

- `archive`: a trial's evidence folder as one reproducible ``bundle.tar.gz`` (the file keeps
  its name, so every stored result stays readable) with a manifest of every file's sha256,
  and the check that an archive read back is the one the result recorded.
- `stores`: where archives go (a folder, the results store itself, or S3 through `s3`), and
  the keys and URIs that name them.

Grading lives in `hangar.verifiers`; what the agent CLIs run from is an agent *bundle*
(`hangar.sandbox.bundles`): "archive" is the evidence's word.
"""
