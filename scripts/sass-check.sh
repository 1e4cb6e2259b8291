#!/usr/bin/env bash
# Checks the machine code of the kernels whose (mangled) names match a pattern in a binary or object file:
# per kernel, the HGMMA count (wgmma in SASS: the tensor-core path of Hopper), local-memory traffic
# (LDL/STL: spills or a register array indexed at run time) and the resource usage (registers, stack,
# shared memory; what -Xptxas -v reports at build time). Fails when a matched kernel has no HGMMA or any
# LDL/STL, or when nothing matches.
# Usage: scripts/sass-check.sh BINARY [NAME_REGEX]   (default regex: the sm90 forward kernels without
# softcap/ALiBi; the general instances spill a few words of their producer warp at work-tile boundaries,
# docs/kernels.md, "Persistent grid")
# cuobjdump comes from the CUDA toolkit, or from the triton wheel when the toolkit is absent ($CUOBJDUMP
# overrides both).
set -uo pipefail
bin=$1
pattern=${2:-_ZN9flashattn6detail4cuda4sm9010fwd_kernelI[^ ]*Lb0EE}
cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || true)}
if [ -z "$cuobjdump" ]; then
  cuobjdump=$(python3 -c 'import os, triton; print(os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump"))' 2>/dev/null)
fi
[ -x "$cuobjdump" ] || { echo "sass-check: no cuobjdump (set CUOBJDUMP)" >&2; exit 2; }
sass=$(mktemp)
trap 'rm -f "$sass"' EXIT
"$cuobjdump" --dump-sass "$bin" >"$sass" || exit 2
# One line per kernel: name, HGMMA count, LDL/STL count (the SASS of a function runs from its
# "Function : name" line to the next one).
report=$(awk -v pat="$pattern" '
  /Function : / { if (name != "") print name, hgmma, local; name = ""; if ($0 ~ pat) { name = $NF; hgmma = 0; local = 0 } next }
  name != "" && /HGMMA/ { hgmma++ }
  name != "" && /[^A-Z](LDL|STL)[. ]/ { local++ }
  END { if (name != "") print name, hgmma, local }' "$sass")
if [ -z "$report" ]; then
  echo "sass-check: no kernel matches $pattern in $bin" >&2
  exit 1
fi
echo "kernel HGMMA LDL/STL"
echo "$report"
echo "resource usage:"
"$cuobjdump" --dump-resource-usage "$bin" 2>/dev/null | grep -A1 -E "$pattern" | grep -E "Function|REG"
echo "$report" | awk '$2 == 0 || $3 > 0 { bad = 1; print "sass-check: " $1 ": " $2 " HGMMA, " $3 " LDL/STL" } END { exit bad }'
