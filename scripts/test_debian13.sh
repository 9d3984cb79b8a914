#!/usr/bin/env bash
# The second platform, tested for real: a Debian 13 (trixie) root built with debootstrap from
# Debian's packages (Python 3.13, R 4.5), holding a clean clone of this project's HEAD, in which
# the README's set-up, `make demo`, the R package's testthat suite, the CLI tests and lessons 00
# and 01 (nbval) run. Needs root: without it, it fails when CI=true and skips elsewhere.
#
#   bash scripts/test_debian13.sh        (make test-debian13)
#
# The root is cached outside the project (KERASDIST_DEBIAN13_ROOT, default
# /var/cache/kerasdist/debian13) and rebuilt only when missing or broken. The host's CA
# certificates, resolv.conf, Debian mirror (read from its apt sources) and pip configuration
# (files and PIP_* variables) go into it, so its package clients reach the same registries.
set -euo pipefail
cd "$(dirname "$0")/.."

ROOT=${KERASDIST_DEBIAN13_ROOT:-/var/cache/kerasdist/debian13}
PROJECT=/root/kerasdist
BUILD_TIMEOUT_S=1800
STEP_TIMEOUT_S=1800

skip_or_fail() {
    if [ "${CI:-}" = true ]; then
        echo "kerasdist: error: $1" >&2
        exit 1
    fi
    echo "Skipped the Debian 13 platform test: $1"
    exit 0
}

[ "$(id -u)" = 0 ] || skip_or_fail "it needs root (debootstrap, chroot, mount); run it with sudo"
command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null \
    || skip_or_fail "debootstrap is missing and could not be installed (apt-get install debootstrap)"

# The host's Debian mirror: the first non-security URI of its apt sources (one-line or deb822 form).
host_mirror() {
    {
        cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
            | awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) { print $i; break } }'
        cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '$1 == "URIs:" { print $2 }'
    } | grep -v -- '-security' | grep -E '/debian/?$' | head -1
}

unmount_all() {
    for mount_point in sys proc dev; do
        mountpoint -q "$ROOT/$mount_point" && umount -R -l "$ROOT/$mount_point"
    done
    return 0
}

# Run a command in the root with the host's registry settings, bounded by STEP_TIMEOUT_S.
in_root() {
    local variables=(HOME=/root LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
                     "CI=${CI:-}" DEBIAN_FRONTEND=noninteractive TF_CPP_MIN_LOG_LEVEL=2)
    while IFS= read -r variable; do variables+=("$variable"); done < <(env | grep '^PIP_' || true)
    timeout "$STEP_TIMEOUT_S" chroot "$ROOT" env -i "${variables[@]}" bash -c "cd $PROJECT && $1"
}

root_works() {
    [ -f "$ROOT/.kerasdist-complete" ] && timeout 60 chroot "$ROOT" python3 -c "import venv, ensurepip" 2>/dev/null
}

mirror=$(host_mirror)
[ -n "$mirror" ] || skip_or_fail "no Debian mirror found in /etc/apt/sources.list or /etc/apt/sources.list.d"
started=$(date +%s)
if ! root_works; then
    echo "Building the Debian 13 root in $ROOT from $mirror"
    rm -rf "$ROOT"
    mkdir -p "$(dirname "$ROOT")"
    timeout "$BUILD_TIMEOUT_S" debootstrap --variant=minbase \
        --include=ca-certificates,git,make,python3,python3-venv trixie "$ROOT" "$mirror" >/dev/null
    touch "$ROOT/.kerasdist-complete"
    echo "Debian 13 root built in $(( $(date +%s) - started )) s"
fi

# Mounts left by an interrupted run are cleared first. A container that shares the host's network
# namespace refuses a second sysfs ("sysfs already mounted on /sys"): the host's /sys is bound then.
unmount_all
trap unmount_all EXIT
mount -t proc proc "$ROOT/proc"
mount --rbind /dev "$ROOT/dev" && mount --make-rslave "$ROOT/dev"
if ! mount -t sysfs sysfs "$ROOT/sys" 2>/dev/null; then
    mount --rbind /sys "$ROOT/sys" && mount --make-rslave "$ROOT/sys"
fi
cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
cp /usr/local/share/ca-certificates/* "$ROOT/usr/local/share/ca-certificates/" 2>/dev/null || true
cp /etc/ssl/certs/ca-certificates.crt "$ROOT/etc/ssl/certs/ca-certificates.crt"
for file in /etc/pip.conf /root/.config/pip/pip.conf /root/.pip/pip.conf; do
    if [ -f "$file" ]; then
        mkdir -p "$ROOT$(dirname "$file")"
        cp "$file" "$ROOT$file"
    fi
done

rm -rf "${ROOT:?}$PROJECT"
git clone -q "$PWD" "$ROOT$PROJECT"
echo "Debian 13 root: $(chroot "$ROOT" python3 --version), commit $(git rev-parse --short HEAD)"
# The README's set-up and demo: show set-up's choices and the accuracies, or the end of a failure.
if ! in_root "make demo" > "$ROOT/tmp/kerasdist-demo.log" 2>&1; then
    tail -30 "$ROOT/tmp/kerasdist-demo.log"
    echo "kerasdist: error: make demo failed in the Debian 13 root (log: $ROOT/tmp/kerasdist-demo.log)" >&2
    exit 1
fi
grep -E '^(Dependencies|TensorFlow build|Data|fixed_)' "$ROOT/tmp/kerasdist-demo.log"
in_root ".venv/bin/python -m pytest -q tests/test_cli.py"
in_root ".venv/bin/python -m pytest -q -s tests/test_r_package.py::test_testthat_suite_passes_with_rscript"
in_root ".venv/bin/python -m pytest -q --nbval-lax --nbval-current-env notebooks/00_*.ipynb notebooks/01_quickstart.ipynb"
echo "Debian 13 platform test passed in $(( $(date +%s) - started )) s"
