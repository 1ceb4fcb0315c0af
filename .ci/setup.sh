#!/usr/bin/env bash
# Installs everything Lorekeeper needs on a fresh Debian 12 machine with a Rust
# toolchain: system libraries for the window, and the model files under models/.
# Safe to run twice: every step checks before it installs. Nothing is fetched at run time.
set -euo pipefail
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

# --- System packages -------------------------------------------------------------
# Run-time libraries of the window (winit, glow, fontconfig) and Xvfb for headless runs.
APT_PACKAGES=(
  libxkbcommon0 libxkbcommon-x11-0 libx11-xcb1 libxcursor1 libxrandr2 libxi6
  libwayland-client0 libwayland-cursor0 libwayland-egl1 libfontconfig1
  libegl1 libegl-mesa0 libgl1-mesa-dri libvulkan1 mesa-vulkan-drivers
  xvfb xauth
)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

echo "setup: done"
