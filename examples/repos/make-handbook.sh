#!/usr/bin/env bash
# Rebuilds repos/handbook.bundle, the knowledge example's repository (a service's docs),
# byte for byte the same commits: fixed identities and dates make the commit ids
# reproducible.
#   1. "handbook at 1.0"            (2026-01-10) <- as_of of the questions about 1.0
#   2. "handbook at 1.1"            (2026-03-02) <- as_of of the other questions
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export GIT_AUTHOR_NAME=handbook GIT_AUTHOR_EMAIL=handbook@example.invalid
export GIT_COMMITTER_NAME=handbook GIT_COMMITTER_EMAIL=handbook@example.invalid
export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
cd "$work"
git init -q -b main handbook && cd handbook
mkdir -p docs/adr docs/runbooks
cat > README.md <<'MD'
# ledger-api

The ledger API: accounts, invoices and payments for the web and mobile apps.
Documentation lives in docs/; decisions in docs/adr/; owners in CODEOWNERS.
MD
cat > docs/adr/0001-postgresql.md <<'MD'
# ADR 0001: PostgreSQL for the ledger

Status: accepted (2025-11-04)

## Decision
We store the ledger in PostgreSQL, not MongoDB.

## Why
Every payment updates an invoice and an account balance together: we need
multi-row transactions with serializable isolation, which MongoDB offered only
across a replica set at the time, with a 60 second limit. The team also runs
PostgreSQL already for the reporting database.
MD
cat > docs/status.md <<'MD'
# Status

- Release 1.1 is blocked: the security review of the new session cookies is not
  done (owner: security team, ticket SEC-212).
MD
cat > docs/runbooks/deploy.md <<'MD'
# Deploying a release

1. `make check` must pass on the release branch.
2. Tag the commit `vX.Y.Z` and push the tag.
3. `make release` builds the image and rolls it out to staging.
4. After 30 minutes of clean staging metrics, `make promote` rolls out production.
MD
cat > CHANGELOG.md <<'MD'
# Changelog

## 1.0 (2026-01-08)
- Accounts, invoices and payments.
- Rate limit: 100 requests per minute per API key.
- Sessions stored in Redis.
MD
cat > CODEOWNERS <<'TXT'
/billing/   @maria
/search/    @devon
/docs/      @devon
TXT
git add -A
GIT_AUTHOR_DATE="2026-01-10T09:00:00Z" GIT_COMMITTER_DATE="2026-01-10T09:00:00Z" \
  git commit -q -m "handbook at 1.0"
cat > docs/adr/0002-signed-cookie-sessions.md <<'MD'
# ADR 0002: Sessions in signed cookies

Status: accepted (2026-02-12)

## Decision
Sessions move from Redis to signed, encrypted cookies.

## Why
The Redis outage of 2026-01-27 logged every user out for 40 minutes. Signed
cookies need no shared store, so an outage of one service no longer ends every
session. Sessions keep their 24 hour lifetime.
MD
cat > docs/status.md <<'MD'
# Status

- Release 1.1 shipped on 2026-02-28.
- Search v2 is blocked: the search vendor has not approved our production API
  key yet (requested 2026-02-20, ticket OPS-88).
MD
cat > docs/runbooks/rotate-session-key.md <<'MD'
# Rotating the session signing key

1. Generate a new key: `ledger keys new --purpose session`.
2. Add it as the primary key; keep the old one as secondary for 24 hours, so
   existing cookies stay valid until they expire.
3. After 24 hours, remove the secondary key: `ledger keys retire OLD_ID`.
MD
cat > CHANGELOG.md <<'MD'
# Changelog

## 1.1 (2026-02-28)
- Rate limit raised from 100 to 300 requests per minute per API key.
- Sessions moved from Redis to signed cookies (ADR 0002).

## 1.0 (2026-01-08)
- Accounts, invoices and payments.
- Rate limit: 100 requests per minute per API key.
- Sessions stored in Redis.
MD
cat > CODEOWNERS <<'TXT'
/billing/   @sam
/search/    @devon
/docs/      @devon
TXT
git add -A
GIT_AUTHOR_DATE="2026-03-02T09:00:00Z" GIT_COMMITTER_DATE="2026-03-02T09:00:00Z" \
  git commit -q -m "handbook at 1.1"
git log --format='%H %s'
git bundle create -q "$here/handbook.bundle" --all
