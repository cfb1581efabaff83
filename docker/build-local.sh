#!/usr/bin/env bash
# Builds the outboxrelay image from a binary built here, pulling nothing,
# and checks it by running `outboxrelay version` from the image's own
# filesystem. It assembles the same final image as docker/Dockerfile
# (static binary, CA certificates, non-root user 65532, no shell) with
# docker/Containerfile.local, FROM scratch.
#
#   docker/build-local.sh                       # builds localhost/outboxrelay:local
#
# Environment:
#   IMAGE          image name (default localhost/outboxrelay:local)
#   VERSION        version stamped into the binary (default: git describe, else dev)
#   PODMAN_STORE   a directory for a throwaway podman store (vfs driver), so the
#                  build touches nothing of the machine's own store; the tests use it
#   PODMAN_RUNTIME OCI runtime for `podman run` (default podman's own; when that
#                  fails and runc is installed, runc is tried: crun refuses hybrid
#                  cgroup hosts)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { echo "build-local: $*" >&2; }

if ! command -v podman >/dev/null 2>&1; then
	say "podman is not installed (apt-get install podman); nothing to do."
	exit 3
fi
IMAGE=${IMAGE:-localhost/outboxrelay:local}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
if [[ ! -s $CA_BUNDLE ]]; then
	say "no CA bundle at $CA_BUNDLE (apt-get install ca-certificates): the image needs it for TLS to Kafka and PostgreSQL."
	exit 1
fi

podman=(podman)
if [[ -n ${PODMAN_STORE:-} ]]; then
	mkdir -p "$PODMAN_STORE"
	podman+=(--root "$PODMAN_STORE/root" --runroot "$PODMAN_STORE/run" --storage-driver vfs)
fi
# Without systemd (containers, CI runners) the cgroupfs manager is the one that works.
if [[ ! -d /run/systemd/system ]]; then
	podman+=(--cgroup-manager cgroupfs)
fi

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

say "building a static binary, version $VERSION"
CGO_ENABLED=0 GOOS=linux go build -trimpath \
	-ldflags "-s -w -X github.com/outboxrelay/outboxrelay/cmd/outboxrelay/internal/app.Version=$VERSION" \
	-o "$ctx/outboxrelay" ./cmd/outboxrelay
cp "$CA_BUNDLE" "$ctx/ca-certificates.crt"
# The entries distroless/static's nonroot variant has.
cat >"$ctx/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"$ctx/group" <<'EOF'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
EOF
cp docker/Containerfile.local "$ctx/Containerfile"

say "building $IMAGE from scratch (no pulls, no network)"
"${podman[@]}" build --pull=never --network none --tag "$IMAGE" --file "$ctx/Containerfile" "$ctx" >&2

user=$("${podman[@]}" image inspect --format '{{.Config.User}}' "$IMAGE")
if [[ $user != 65532:65532 ]]; then
	say "the image runs as user '$user', want 65532:65532"
	exit 1
fi

# Sandboxes (this one included) may forbid the default rlimits; these are
# plenty for `version`.
run=(run --rm --network none --ulimit nofile=4096:4096 --ulimit nproc=4096:4096)
runtime=()
if [[ -n ${PODMAN_RUNTIME:-} ]]; then
	runtime=(--runtime "$PODMAN_RUNTIME")
fi
if ! out=$("${podman[@]}" "${runtime[@]}" "${run[@]}" "$IMAGE" version 2>&1); then
	if [[ -z ${PODMAN_RUNTIME:-} ]] && command -v runc >/dev/null 2>&1; then
		say "podman run failed ($out); trying the runc runtime"
		runtime=(--runtime runc)
		out=$("${podman[@]}" "${runtime[@]}" "${run[@]}" "$IMAGE" version)
	else
		say "podman run failed: $out"
		exit 1
	fi
fi
# The first line names the version; the revision and Go version follow.
if [[ ${out%%$'\n'*} != "outboxrelay $VERSION" ]]; then
	say "outboxrelay version in the image printed '$out', want its first line 'outboxrelay $VERSION'"
	exit 1
fi
# No shell: an attacker in the container has nothing to run.
if "${podman[@]}" "${runtime[@]}" "${run[@]}" --entrypoint /bin/sh "$IMAGE" -c true >/dev/null 2>&1; then
	say "the image has a shell (/bin/sh), want none"
	exit 1
fi
size=$("${podman[@]}" image inspect --format '{{.Size}}' "$IMAGE")
say "built $IMAGE ($((size / 1024 / 1024)) MiB, user 65532, no shell)"
echo "$out"
