"""The judging half of a trial: admission rules, the host-verifier protocol, verifier
commands, the junit and choice graders, evidence archives and stores
(docs/architecture.md, "Kinds of trial")."""
