"""S3 helper of the stand-in run (what `mc` in the MinIO pod does on kind), talking to moto.

    s3.py ENDPOINT mb BUCKET
    s3.py ENDPOINT put FILE s3://bucket/key       FILE `-`: standard input
    s3.py ENDPOINT rm s3://bucket/key
    s3.py ENDPOINT cp s3://bucket/key s3://bucket/key2
    s3.py ENDPOINT stat s3://bucket/key          exit 1 when the object does not exist
    s3.py ENDPOINT cat-parts s3://bucket/prefix  concatenates every part-*.jsonl under prefix
    s3.py ENDPOINT ls s3://bucket[/prefix]       recursive listing: size and key per line
"""

from __future__ import annotations

import fnmatch
import sys

import boto3
import botocore.exceptions


def split(url: str) -> tuple:
    if not url.startswith("s3://"):
        raise SystemExit(f"s3.py: {url!r} is not an s3:// URL")
    bucket, _, key = url[5:].partition("/")
    return bucket, key


def main(argv: list) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    endpoint, command, args = argv[0], argv[1], argv[2:]
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="weir-e2e",
                      aws_secret_access_key="weir-e2e-secret")
    if command == "mb":
        try:
            s3.create_bucket(Bucket=args[0])
        except s3.exceptions.BucketAlreadyOwnedByYou:
            pass
        return 0
    if command == "put":
        bucket, key = split(args[1])
        if args[0] == "-":
            body = sys.stdin.buffer.read()
        else:
            with open(args[0], "rb") as f:
                body = f.read()
        s3.put_object(Bucket=bucket, Key=key, Body=body)
        return 0
    if command == "rm":
        bucket, key = split(args[0])
        s3.delete_object(Bucket=bucket, Key=key)
        return 0
    if command == "cp":
        (src_bucket, src_key), (bucket, key) = split(args[0]), split(args[1])
        s3.copy_object(Bucket=bucket, Key=key, CopySource={"Bucket": src_bucket, "Key": src_key})
        return 0
    if command == "stat":
        bucket, key = split(args[0])
        try:
            s3.head_object(Bucket=bucket, Key=key)
        except botocore.exceptions.ClientError as e:
            print(f"s3.py: stat {args[0]}: {e}", file=sys.stderr)
            return 1
        return 0
    bucket, prefix = split(args[0])
    keys = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        keys += [(o["Key"], o["Size"]) for o in page.get("Contents", [])]
    if command == "ls":
        for key, size in keys:
            print(f"{size:>12} {key}")
        return 0
    if command == "cat-parts":
        for key, _ in keys:
            if fnmatch.fnmatch(key.rsplit("/", 1)[-1], "part-*.jsonl"):
                sys.stdout.buffer.write(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
        return 0
    print(f"s3.py: unknown command {command!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
