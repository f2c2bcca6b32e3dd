#!/usr/bin/env bash
# A CPU stand-in for the accelerator machine's Python, to rehearse experiments/gpu_check.sh in.
#   bash experiments/gpu_check_devlike.sh [DIR]        # default /tmp/devlike; prints its python
# (PYTHON: the project's venv python, default .venv/bin/python, whose packages it links)
# That machine's image holds its own versions of transformers (5.17.0), huggingface_hub (1.33.0),
# tokenizers (0.23.2) and accelerate (1.15.0), and lacks everything not in its package list
# (/work/.library/device/KINDS.md: no transformer-lens, datasets, ray, devinterp, ...). This
# makes a venv of this machine's Python with those four versions installed, and every other
# package of .venv that the image also has made visible through links (torch included, a
# stand-in for the image's own); what the image lacks is absent, so the carried wheels must
# bring it. Not the same: Python 3.11 here against 3.12 there, torch 2.13 against 2.11, and
# the versions of the packages linked from .venv.
set -euo pipefail
DIR=${1:-/tmp/devlike}
VENV_SITE=$("${PYTHON:-.venv/bin/python}" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
LIST=${DEVICE_PACKAGES:-/work/.library/device/KINDS.md}
rm -rf "$DIR" && python3 -m venv "$DIR/venv" && mkdir -p "$DIR/linked"
"$DIR/venv/bin/python" -m pip install -q --no-deps transformers==5.17.0 huggingface_hub==1.33.0 \
  tokenizers==0.23.2 accelerate==1.15.0
"$DIR/venv/bin/python" - "$VENV_SITE" "$LIST" "$DIR/linked" <<'PY'
import importlib.metadata as md, os, re, sys
site, listing, linked = sys.argv[1:]
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
text = open(listing).read()
names = text.split("Packages: ", 1)[1].split("\n", 1)[0] if "Packages: " in text else text
allowed = {norm(n.strip().rstrip(".")) for n in re.split(r"[,\n]", names) if n.strip()}
for dist in md.distributions(path=[site]):
    if norm(dist.metadata["Name"]) not in allowed:
        continue
    for top in {str(f).split("/")[0] for f in dist.files or []} - {".."}:
        src, dst = os.path.join(site, top), os.path.join(linked, top)
        if not top.endswith(".pth") and os.path.exists(src) and not os.path.lexists(dst):
            os.symlink(src, dst)
PY
"$DIR/venv/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" | \
  xargs -I{} sh -c "echo $DIR/linked > {}/zz_device_image.pth"
echo "$DIR/venv/bin/python"
