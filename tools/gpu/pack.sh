#!/usr/bin/env bash
# Builds crossbow for a GPU machine that has the CUDA 13 toolkit, cuDNN/NCCL (e.g. PyTorch's) and
# python3 with PyTorch, but none of Debian's -dev packages: build-gpu/ (CUDA on; oneDNN and MPI
# off, fewer libraries to carry), then build-gpu/gpu-bundle.tar.xz holding
#   real/  cb-train cb-run cb-inspect cb-tests
#   lib/   every shared library they load except the CUDA ones (the GPU machine's are used),
#          glibc and its loader included, so they run whatever that machine's glibc is; also
#          glibc's libdl/libpthread/librt, which the NVIDIA driver's libcuda.so.1 may ask for and
#          which must match the bundled libc
#   bin/   wrappers that start real/X with lib/'s loader (tests start the tools through them);
#          the loader's --library-path replaces LD_LIBRARY_PATH, so a wrapper passes lib/, then
#          CB_CUDA_LIBS (the driver's and the CUDA libraries' folders: tools/gpu/check.sh finds
#          them), then the caller's LD_LIBRARY_PATH
# Then: the device tool carries build-gpu/gpu-bundle.tar.xz and runs tools/gpu/check.sh.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCB_WITH_DNNL=OFF -DCB_WITH_MPI=OFF \
  -DCB_WITH_CUDA=ON >/dev/null
cmake --build build-gpu -j"$(nproc)" --target cb-train cb-run cb-inspect cb-tests
grep -q "CB_HAVE_CUDA:INTERNAL=ON\|CMAKE_CUDA_COMPILER:.*nvcc" build-gpu/CMakeCache.txt ||
  { echo "pack: the CUDA toolkit was not found: nothing to pack for a GPU" >&2; exit 1; }
b=build-gpu/bundle
rm -rf "$b" && mkdir -p "$b"/{real,lib,bin}
cp build-gpu/cb-train build-gpu/cb-run build-gpu/cb-inspect build-gpu/tests/cb-tests "$b/real/"
for x in "$b"/real/*; do ldd "$x"; done |
  awk '/=>/ && $3 ~ /^\// {print $3} $1 ~ /ld-linux/ {print $1}' | sort -u |
  grep -v -E 'libcuda\.|libcudnn|libcublas|libnccl|libcudart' |
  while read -r so; do cp -L "$so" "$b/lib/"; done
libc_dir=$(dirname "$(ldd "$b/real/cb-train" | awk '$1 == "libc.so.6" {print $3}')")
for so in libdl.so.2 libpthread.so.0 librt.so.1 libm.so.6; do
  if [ -e "$libc_dir/$so" ] && [ ! -e "$b/lib/$so" ]; then cp -L "$libc_dir/$so" "$b/lib/"; fi
done
for x in "$b"/real/*; do
  n=$(basename "$x")
  cat > "$b/bin/$n" <<WRAP
#!/usr/bin/env bash
here=\$(cd "\$(dirname "\$0")/.." && pwd)
path=\$here/lib\${CB_CUDA_LIBS:+:\$CB_CUDA_LIBS}\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
exec "\$here/lib/ld-linux-x86-64.so.2" --library-path "\$path" "\$here/real/$n" "\$@"
WRAP
  chmod +x "$b/bin/$n"
done
tar -C "$b" -cJf build-gpu/gpu-bundle.tar.xz real lib bin
du -h build-gpu/gpu-bundle.tar.xz
