#!/usr/bin/env python3
"""Machine-code checks for the CUDA kernels, without a GPU (bench/NOTES.md uses all three).

  python3 bench/machine_code.py cubin BUILD_DIR OBJECT OUT.cubin [-- NVCC_ARGS...]
      Compiles one object of a configured Ninja build (e.g. OBJECT =
      CMakeFiles/latentkv.dir/src/decode/cuda/instantiations/v32_fp8.cu.o) to an sm_90a cubin with
      the build's own nvcc command (its compute_80 targets dropped); NVCC_ARGS such as -Xptxas=-v
      go to nvcc.
  python3 bench/machine_code.py diff A.cubin B.cubin
      Compares the .text of every function of two cubins: how a merged default is shown to be the
      machine code an A/B measured as a variant (the same bytes, function by function).
  python3 bench/machine_code.py control CUBIN FUNCTION [--all] [--from I] [--to J]
      FUNCTION: the mangled name, or a substring that only one function's name contains. Lists the
      function's instructions [I, J) (indices as ncu's per-instruction export counts them) with their scheduling control bits: the scoreboard an
      instruction sets when its result is ready (wb) or its operands are read (rb), and the
      scoreboards it waits for (wait, bit k = scoreboard k). Without --all only loads, barriers,
      wgmma and the instructions that wait for scoreboard 5 are listed.

Needs pyelftools and nvdisasm (the CUDA toolkit's, or PyPI's nvidia-cuda-nvdisasm; set NVDISASM).
Control bits (Volta and later, 128-bit instructions): bits 105-108 stall cycles, 109 yield, 110-112
write scoreboard, 113-115 read scoreboard, 116-121 wait mask, 122-125 operand reuse; 7 means none.
"""
import argparse
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig


def elf_texts(path):
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        elf = ELFFile(f)
        return {s.name[len(".text."):]: s.data() for s in elf.iter_sections() if s.name.startswith(".text.")}


def cmd_cubin(a):
    out = subprocess.run(["ninja", "-C", a.build, "-t", "commands", "latentkv"], capture_output=True, text=True,
                         check=True).stdout
    lines = [l for l in out.splitlines() if f"-o {a.object}" in l]
    if not lines:
        sys.exit(f"no command in {a.build} writes {a.object}")
    cmd = lines[0]
    cmd = re.sub(r"-gencode=arch=compute_80,code=\S*", "", cmd)
    cmd = re.sub(r" -MD ", " ", cmd)
    cmd = re.sub(r" -M[TF] \S*", "", cmd)
    cmd = cmd.replace(" -c ", " -cubin ")
    out_arg = " -o " + shlex.quote(os.path.abspath(a.out))
    cmd = re.sub(r" -o \S*", lambda _: out_arg, cmd)
    cmd += " " + " ".join(shlex.quote(x) for x in a.nvcc_args)
    r = subprocess.run(cmd, shell=True, cwd=a.build, capture_output=True, text=True)
    sys.stdout.write("".join(l + "\n" for l in (r.stdout + r.stderr).splitlines() if "C7519" not in l))
    return r.returncode


def cmd_diff(a):
    x, y = elf_texts(a.a), elf_texts(a.b)
    same = diff = 0
    for k in sorted(set(x) | set(y)):
        if x.get(k) == y.get(k):
            same += 1
        else:
            diff += 1
            print("DIFF", k[:150], len(x.get(k, b"")), len(y.get(k, b"")))
    print("same", same, "diff", diff)
    return 1 if diff else 0


def nvdisasm():
    for c in (os.environ.get("NVDISASM"), shutil.which("nvdisasm")):
        if c:
            return c
    roots = {sysconfig.get_paths()["purelib"], os.path.dirname(os.__file__)}
    found = [f for r in roots for f in glob.glob(os.path.join(r, "**", "nvidia", "*", "bin", "nvdisasm"), recursive=True)]
    if found:
        return found[0]
    sys.exit("nvdisasm not found: set NVDISASM (pip install nvidia-cuda-nvdisasm provides one)")


def cmd_control(a):
    from elftools.elf.elffile import ELFFile

    with open(a.cubin, "rb") as f:
        texts = [s for s in ELFFile(f).iter_sections() if s.name.startswith(".text.")]
        secs = [s for s in texts if s.name == ".text." + a.function] or [s for s in texts if a.function in s.name]
        if len(secs) != 1:
            sys.exit(f"{len(secs)} functions match {a.function!r}")
        name, data = secs[0].name, secs[0].data()
    full = subprocess.run([nvdisasm(), "-c", a.cubin], capture_output=True, text=True, check=True).stdout
    start = full.index(".section\t" + name + ",")
    end = full.find(".section\t", start + 10)
    text = {}
    for line in full[start:end if end > 0 else None].splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            text[int(m.group(1), 16) // 16] = m.group(2)
    first, last = a.from_, min(a.to if a.to is not None else len(data) // 16, len(data) // 16)
    for i in range(first, last):
        hi = int.from_bytes(data[16 * i + 8:16 * i + 16], "little")
        c = hi >> 41
        wb, rb, wait = (c >> 5) & 7, (c >> 8) & 7, (c >> 11) & 0x3F
        t = text.get(i, "?")
        if a.all or wait & 0x20 or any(k in t for k in ("LDG", "LDS", "BAR.", "HGMMA", "WARPGROUP", "CCTL")):
            print(f"{i:5d} wb={wb if wb != 7 else '-'} rb={rb if rb != 7 else '-'} wait={wait:06b} stall={c & 15:2d} {t}")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("cubin")
    c.add_argument("build")
    c.add_argument("object")
    c.add_argument("out")
    c.add_argument("nvcc_args", nargs="*")
    d = sub.add_parser("diff")
    d.add_argument("a")
    d.add_argument("b")
    k = sub.add_parser("control")
    k.add_argument("cubin")
    k.add_argument("function")
    k.add_argument("--all", action="store_true")
    k.add_argument("--from", dest="from_", type=int, default=0)
    k.add_argument("--to", type=int)
    a = p.parse_args()
    return {"cubin": cmd_cubin, "diff": cmd_diff, "control": cmd_control}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
