"""Evidence archives in S3 or any S3-compatible store (MinIO, Ceph, a local server).

``s3://bucket/prefix`` with an optional ``?endpoint=http://host:port``; without it,
boto3's usual settings apply (``AWS_ENDPOINT_URL``, profiles, instance roles), as do
its credentials: nothing secret ever goes into a URL, a result or a log. Large bundles
go up in parts; every object carries its sha256 as metadata, checked after upload and
on every read. Throttling and transient errors are retried (botocore's adaptive mode).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from hangar.errors import ConfigError, EvidenceStoreError
from hangar.evidence.archive import sha256_file
from hangar.evidence.stores import EvidenceStore, check_key
from hangar.sandbox.base import MiB

PART_SIZE = 16 * MiB


def _boto3() -> Any:
    try:
        import boto3
    except ImportError:
        raise ConfigError("s3:// evidence needs boto3: pip install 'hangar-farm[s3]'") from None
    return boto3


class S3EvidenceStore(EvidenceStore):
    """A bucket and key prefix in an S3-compatible object store."""

    def __init__(self, bucket: str, prefix: str = "", endpoint_url: str | None = None) -> None:
        from botocore.config import Config

        self.bucket, self.prefix, self.endpoint_url = bucket, prefix.strip("/"), endpoint_url
        self.client = _boto3().client(
            "s3",
            endpoint_url=endpoint_url,
            config=Config(
                retries={"max_attempts": 10, "mode": "adaptive"},
                connect_timeout=10,
                read_timeout=120,
            ),
        )

    @classmethod
    def from_url(cls, url: str) -> S3EvidenceStore:
        """Parse ``s3://bucket/prefix[?endpoint=URL]``."""
        parsed = urlparse(url)
        if not parsed.netloc:
            raise ConfigError(f"{url!r}: an s3:// URL needs a bucket (s3://bucket/prefix)")
        endpoint = parse_qs(parsed.query).get("endpoint", [None])[0]
        return cls(parsed.netloc, parsed.path, endpoint)

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{check_key(key)}" if self.prefix else check_key(key)

    def _fail(self, what: str, exc: Exception) -> EvidenceStoreError:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        return EvidenceStoreError(f"S3{where}: cannot {what}: {exc}")

    def put(self, key: str, source: Path) -> str:
        """Upload (in parts when large) and check the stored size and sha256."""
        from boto3.s3.transfer import TransferConfig
        from botocore.exceptions import BotoCoreError, ClientError

        sha = sha256_file(source)
        target = self._key(key)
        try:
            self.client.upload_file(
                str(source),
                self.bucket,
                target,
                ExtraArgs={"Metadata": {"sha256": sha}},
                Config=TransferConfig(multipart_threshold=PART_SIZE, multipart_chunksize=PART_SIZE),
            )
            head = self.client.head_object(Bucket=self.bucket, Key=target)
        except (BotoCoreError, ClientError) as exc:
            raise self._fail(f"upload {self.uri(key)}", exc) from exc
        if head["ContentLength"] != source.stat().st_size or head["Metadata"].get("sha256") != sha:
            raise EvidenceStoreError(f"{self.uri(key)} does not match what was uploaded")
        return self.uri(key)

    def get(self, key: str, dest: Path) -> None:
        """Download and check the sha256 recorded at upload."""
        from botocore.exceptions import BotoCoreError, ClientError

        target = self._key(key)
        try:
            head = self.client.head_object(Bucket=self.bucket, Key=target)
            self.client.download_file(self.bucket, target, str(dest))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey"):
                raise EvidenceStoreError(f"nothing stored at {self.uri(key)}") from exc
            raise self._fail(f"download {self.uri(key)}", exc) from exc
        except BotoCoreError as exc:
            raise self._fail(f"download {self.uri(key)}", exc) from exc
        want = head["Metadata"].get("sha256")
        if want and sha256_file(dest) != want:
            raise EvidenceStoreError(f"{self.uri(key)} is corrupt: its sha256 differs from upload")

    def exists(self, key: str) -> bool:
        """Whether the object exists."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey"):
                return False
            raise self._fail(f"look up {self.uri(key)}", exc) from exc
        except BotoCoreError as exc:
            raise self._fail(f"look up {self.uri(key)}", exc) from exc
        return True

    def uri(self, key: str) -> str:
        """``s3://bucket/prefix/key``."""
        return f"s3://{self.bucket}/{self._key(key)}"
