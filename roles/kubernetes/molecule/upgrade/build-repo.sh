#!/usr/bin/env bash
# Builds the scenario's scripted Kubernetes: a signed apt repository per minor, as pkgs.k8s.io lays them out
# (OUT/v1.34/, OUT/v1.35/: Packages, InRelease, Release.key), of kubeadm, kubelet and kubectl packages whose
# programs record what they are asked (no kubeadm, API server or kubelet runs here). The key is made for this run
# in a directory of its own and its agent stopped. Usage: build-repo.sh OUT VERSION...
set -euo pipefail
out="$1"; shift
work="$(mktemp -d)"
export GNUPGHOME="$work/gnupg"
trap 'gpgconf --kill gpg-agent >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
install -d -m 0700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-gen-key "aisite molecule <molecule@aisite.invalid>" ed25519 sign never
log=/var/log/aisite-scripted.log
api=/var/lib/aisite-scripted-apiserver/version
for version in "$@"; do
  minor="v${version%.*}"
  repo="$out/$minor"
  install -d "$repo"
  for pkg in kubeadm kubelet kubectl; do
    root="$work/$pkg-$version"
    install -d "$root/DEBIAN" "$root/usr/bin"
    printf 'Package: %s\nVersion: %s-1.1\nArchitecture: all\nMaintainer: aisite molecule <molecule@aisite.invalid>\nDescription: scripted %s %s (records its arguments)\n' \
      "$pkg" "$version" "$pkg" "$version" >"$root/DEBIAN/control"
    case "$pkg" in
      kubeadm) body="echo \"kubeadm-$version \$*\" >>$log
if [ \"\$1 \$2\" = 'upgrade apply' ]; then mkdir -p ${api%/*}; echo \"\${3#v}\" >$api; fi
if [ \"\$1\" = version ]; then echo v$version; fi" ;;
      kubelet) body="if [ \"\$1\" = --version ]; then echo 'Kubernetes v$version'; exit 0; fi
echo 'kubelet-$version start' >>$log
exec sleep infinity"
        install -d "$root/lib/systemd/system"
        printf '[Unit]\nDescription=scripted kubelet %s\n[Service]\nExecStart=/usr/bin/kubelet\n[Install]\nWantedBy=multi-user.target\n' \
          "$version" >"$root/lib/systemd/system/kubelet.service" ;;
      kubectl) body="printf '{\"clientVersion\": {\"gitVersion\": \"v$version\"}, \"serverVersion\": {\"gitVersion\": \"v%s\"}}\\n' \"\$(cat $api)\"" ;;
    esac
    printf '#!/bin/sh\n# scripted %s %s (aisite molecule)\n%s\n' "$pkg" "$version" "$body" >"$root/usr/bin/$pkg"
    chmod 0755 "$root/usr/bin/$pkg"
    dpkg-deb --root-owner-group -Zgzip --build "$root" "$repo/${pkg}_$version-1.1_all.deb" >/dev/null
  done
  (
    cd "$repo"
    for deb in *.deb; do
      dpkg-deb --field "$deb"
      printf 'Filename: ./%s\nSize: %s\nSHA256: %s\n\n' "$deb" "$(stat -c %s "$deb")" "$(sha256sum "$deb" | cut -d' ' -f1)"
    done >Packages
    printf 'Origin: aisite molecule\nDate: %s\nSHA256:\n %s %s Packages\n' "$(LC_ALL=C date -Ru)" \
      "$(sha256sum Packages | cut -d' ' -f1)" "$(stat -c %s Packages)" >Release
    gpg --batch --quiet --yes --clearsign --output InRelease Release
    gpg --batch --armor --export >Release.key
  )
done
