# Shared helpers for tests/system/run.sh: prerequisites, the cached Debian rootfs, step reporting.
# Sourced, not executed.

say() { printf '== %s\n' "$*"; }
ok() { printf '   ok: %s\n' "$*"; }
die() { printf 'test-system: FAILED: %s\n' "$*" >&2; exit 1; }
# A prerequisite that is missing and cannot be installed: say what and how, exit 3 (not a test failure).
missing() { printf 'test-system: cannot run: %s\n' "$*" >&2; exit 3; }

# Does the output of a command match an extended regex? `cmd | grep -q` cannot say so under `set -o pipefail`:
# grep -q exits at the first match, the command then dies of SIGPIPE (141) if it writes more, and the pipe
# fails although the line was there. So read all of the output first, then match. Fails if the command does.
output_has() {
    local pattern=$1 out; shift
    out=$("$@") || return 1
    grep -Eq -- "$pattern" <<<"$out"
}

# Poll a command until it succeeds or the deadline passes; never a bare sleep-and-hope.
eventually() {
    local timeout=$1 what=$2; shift 2
    local deadline=$((SECONDS + timeout))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "$what (not within ${timeout}s)"
        sleep 0.5
    done
}

# Debian's mirror as this host's apt is configured (deb822 or one-line format); no host is written here.
host_debian_mirror() {
    local uri
    uri=$(awk '/^URIs:/ {for (i = 2; i <= NF; i++) if ($i !~ /security/) {print $i; exit}}' \
          /etc/apt/sources.list.d/*.sources 2>/dev/null | sed -n 1p)
    if [[ -z $uri ]]; then
        uri=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' \
              /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | sed -n 1p)
    fi
    [[ -n $uri ]] || missing "no Debian mirror in /etc/apt/sources.list*; debootstrap needs one"
    printf '%s\n' "$uri"
}

# Install what is missing with apt-get when we are root on Debian; otherwise explain and stop.
need_commands() {
    local -A pkg_of=([debootstrap]=debootstrap [systemd-nspawn]=systemd-container [podman]=podman
                     [runc]=runc [nsenter]=util-linux [curl]=curl [jq]=jq)
    local cmd missing_pkgs=()
    for cmd in "$@"; do
        command -v "$cmd" >/dev/null 2>&1 || missing_pkgs+=("${pkg_of[$cmd]:-$cmd}")
    done
    ((${#missing_pkgs[@]})) || return 0
    if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
        missing "needs ${missing_pkgs[*]} (Debian packages); install them as root: apt-get install ${missing_pkgs[*]}"
    fi
    say "installing missing prerequisites with apt-get: ${missing_pkgs[*]}"
    apt-get update -qq || missing "apt-get update failed; the Debian package registry must be reachable"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing_pkgs[@]}" >/dev/null \
        || missing "apt-get install ${missing_pkgs[*]} failed"
}

# A minimal Debian 12 with systemd and Python 3.11, built once and cached: it is both the nspawn
# machine and the stand-in for the Dockerfile's base image (no container registry is reachable).
ROOTFS_PACKAGES=systemd,systemd-sysv,dbus,python3,python3-venv,python3-pip,python-is-python3,ca-certificates,curl,jq,procps
ensure_rootfs() {
    local rootfs=$1
    if [[ -f $rootfs/.edgeagent-rootfs-complete ]]; then
        ok "cached Debian 12 rootfs: $rootfs"
        return 0
    fi
    local mirror
    mirror=$(host_debian_mirror)
    say "bootstrapping a minimal Debian 12 rootfs into $rootfs (once; a few minutes)"
    rm -rf "$rootfs.partial"
    mkdir -p "$(dirname "$rootfs")"
    debootstrap --variant=minbase --include="$ROOTFS_PACKAGES" bookworm "$rootfs.partial" "$mirror" \
        > "$rootfs.debootstrap.log" 2>&1 \
        || { tail -n 20 "$rootfs.debootstrap.log" >&2; missing "debootstrap failed (log: $rootfs.debootstrap.log)"; }
    touch "$rootfs.partial/.edgeagent-rootfs-complete"
    rm -rf "$rootfs"
    mv "$rootfs.partial" "$rootfs"
    ok "rootfs ready"
}

# PyPI may be reached through a TLS-intercepting proxy whose CA only this host trusts: give the machine
# and the stand-in base image the host's local CAs and pip configuration, as the host's own pip has them.
sync_host_trust() {
    local rootfs=$1 changed=0 crt
    for crt in /usr/local/share/ca-certificates/*.crt; do
        [[ -f $crt ]] || continue
        if ! cmp -s "$crt" "$rootfs/usr/local/share/ca-certificates/$(basename "$crt")"; then
            install -D -m 0644 "$crt" "$rootfs/usr/local/share/ca-certificates/$(basename "$crt")"
            changed=1
        fi
    done
    ((changed)) && chroot "$rootfs" update-ca-certificates >/dev/null 2>&1
    if [[ -f /etc/pip.conf ]]; then cp /etc/pip.conf "$rootfs/etc/pip.conf"; fi
    return 0
}
