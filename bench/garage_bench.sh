# Shared by the remote benchmarks (bench_remote.sh, bench_remote_gc.sh): one Garage node on
# loopback with a known key, and byte counts through the S3 API. Source it after setting WORK
# (scratch dir) and GARAGE (the binary); it sets GPID, GCONF and ENDPOINT.

KEY_ID=GK0123456789abcdef01234567
SECRET=0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
export AWS_ACCESS_KEY_ID=$KEY_ID AWS_SECRET_ACCESS_KEY=$SECRET AWS_DEFAULT_REGION=garage AWS_REGION=garage
export RESTIC_PASSWORD=ckptfs-bench CKPTFS_PASSPHRASE=ckptfs-bench
GPID=""

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# bucket_bytes BUCKET: the exact sum of its objects' sizes (ListObjectsV2 through curl's SigV4).
bucket_bytes() {
    python3 - "$ENDPOINT" "$1" "$KEY_ID" "$SECRET" <<'PY'
import re, subprocess, sys, urllib.parse
ep, bucket, key, secret = sys.argv[1:]
total, token = 0, None
while True:
    q = {"list-type": "2"}
    if token:
        q["continuation-token"] = token
    qs = "&".join(f"{k}={urllib.parse.quote(v, safe='')}" for k, v in sorted(q.items()))
    out = subprocess.run(["curl", "-sS", "--fail", "--aws-sigv4", "aws:amz:garage:s3",
                          "--user", f"{key}:{secret}", "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                          f"{ep}/{bucket}?{qs}"], capture_output=True, text=True, check=True).stdout
    total += sum(int(x) for x in re.findall(r"<Size>(\d+)</Size>", out))
    m = re.search(r"<NextContinuationToken>([^<]+)</NextContinuationToken>", out)
    if "<IsTruncated>true</IsTruncated>" not in out or not m:
        break
    token = m.group(1)
print(total)
PY
}

curl_s3() {
    curl -sS --fail --aws-sigv4 aws:amz:garage:s3 --user "$KEY_ID:$SECRET" \
        -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$@"
}

# start_garage: a fresh node in $WORK/garage (replication 1, the key above); stop_garage
# kills it and removes its data; mkbucket BUCKET gives the key all rights on a new bucket.
start_garage() {
    GDIR=$WORK/garage
    rm -rf "$GDIR"; mkdir -p "$GDIR/meta" "$GDIR/data"
    S3_PORT=$(free_port); RPC_PORT=$(free_port); ADMIN_PORT=$(free_port)
    GCONF=$GDIR/garage.toml
    cat > "$GCONF" <<EOT
metadata_dir = "$GDIR/meta"
data_dir = "$GDIR/data"
db_engine = "sqlite"
replication_factor = 1
rpc_bind_addr = "127.0.0.1:$RPC_PORT"
rpc_public_addr = "127.0.0.1:$RPC_PORT"
rpc_secret = "$(python3 -c 'print("ab"*32)')"
[s3_api]
s3_region = "garage"
api_bind_addr = "127.0.0.1:$S3_PORT"
[admin]
api_bind_addr = "127.0.0.1:$ADMIN_PORT"
EOT
    RUST_LOG=garage=warn "$GARAGE" -c "$GCONF" server > "$GDIR/log" 2>&1 &
    GPID=$!
    for _ in $(seq 100); do "$GARAGE" -c "$GCONF" node id -q >/dev/null 2>&1 && break; sleep 0.1; done
    NODE=$("$GARAGE" -c "$GCONF" node id -q | cut -d@ -f1)
    "$GARAGE" -c "$GCONF" layout assign -z z1 -c 10G "$NODE" >/dev/null
    "$GARAGE" -c "$GCONF" layout apply --version 1 >/dev/null
    "$GARAGE" -c "$GCONF" key import "$KEY_ID" "$SECRET" -n bench --yes >/dev/null
    ENDPOINT=http://127.0.0.1:$S3_PORT
}
stop_garage() {
    kill "$GPID" 2>/dev/null || true; wait "$GPID" 2>/dev/null || true; GPID=""
    rm -rf "$GDIR"
}
mkbucket() {
    "$GARAGE" -c "$GCONF" bucket create "$1" >/dev/null
    "$GARAGE" -c "$GCONF" bucket allow --read --write --owner "$1" --key bench >/dev/null
}
