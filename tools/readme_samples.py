#!/usr/bin/env python3
"""README samples as tests, so they cannot rot.

Every fenced block in README.md carries a marker on the line right before its fence:
  <!-- sample: NAME -->                 a complete C, C++ or Python program, compiled and run
  <!-- sample: NAME harness=HARNESS -->  a C or C++ fragment, run inside HARNESS (defined below)
  <!-- listing -->                       shell commands or output, shown but not run
C, C++ and Python blocks must be samples. `run` compiles each C/C++ sample against the source
tree's headers and the built libshapejit.so and runs it (a non-zero exit fails it);
python/tests/test_readme_samples.py runs the Python samples through samples(). Compiler messages
point at README.md's lines (#line).

usage: readme_samples.py check README.md
       readme_samples.py run README.md --lib path/libshapejit.so --include DIR --work DIR
                             [--cc CC] [--cxx CXX] [--only NAME]
"""
import argparse
import os
import re
import subprocess
import sys
from dataclasses import dataclass

MARKER = re.compile(r"^<!--\s*(?:sample:\s*(?P<name>[A-Za-z0-9_-]+)(?:\s+harness=(?P<harness>[A-Za-z0-9_-]+))?"
                    r"|(?P<listing>listing))\s*-->\s*$")
FENCE = re.compile(r"^```(?P<lang>[A-Za-z0-9_+-]*)\s*$")
RUNNABLE = {"c", "cpp", "python"}


@dataclass
class Sample:
    name: str
    lang: str
    line: int      # README line of the block's first code line
    code: str
    harness: str = ""


class ReadmeError(Exception):
    pass


def samples(readme_path):
    """The marked samples of README (listings skipped); raises ReadmeError on an unmarked block,
    a runnable language marked as a listing, a duplicate name or an unknown harness."""
    with open(readme_path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found, names, i = [], set(), 0
    where = os.path.basename(readme_path)
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        lang = fence.group("lang")
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == "```"), None)
        if end is None:
            raise ReadmeError(f"{where}:{i + 1}: the ```{lang} block is never closed")
        marker = MARKER.match(lines[i - 1].strip()) if i > 0 else None
        if not marker:
            raise ReadmeError(f"{where}:{i + 1}: the ```{lang} block has no marker on the line before its fence "
                              "(<!-- sample: NAME [harness=H] --> or <!-- listing -->; see tools/readme_samples.py)")
        if marker.group("listing"):
            if lang in RUNNABLE:
                raise ReadmeError(f"{where}:{i + 1}: a ```{lang} block is marked as a listing; {sorted(RUNNABLE)} "
                                  "blocks must be samples that run")
        else:
            name, harness = marker.group("name"), marker.group("harness") or ""
            if lang not in RUNNABLE:
                raise ReadmeError(f"{where}:{i + 1}: sample '{name}' is a ```{lang} block; samples are "
                                  f"{sorted(RUNNABLE)} (mark shell and output as <!-- listing -->)")
            if name in names:
                raise ReadmeError(f"{where}:{i + 1}: sample name '{name}' is used twice")
            if harness and (harness not in HARNESSES or HARNESSES[harness][0] != lang):
                raise ReadmeError(f"{where}:{i + 1}: sample '{name}' names harness '{harness}', which is not a "
                                  f"```{lang} harness of tools/readme_samples.py")
            names.add(name)
            found.append(Sample(name, lang, i + 2, "\n".join(lines[i + 1:end]) + "\n", harness))
        i = end + 1
    return found


# ---- Harnesses: what a fragment needs around it ------------------------------------------------
# (language, code before the fragment, code after it). Inside main(); the fragment's own
# #include lines are moved to the top. The code after checks what the fragment computed.

_Q4_BEFORE = r"""
#include <shapejit/shapejit.h>
#include <stdio.h>
#include <stdint.h>
int main(void) {
  /* A 4-row table packed to Q4, pruned: 6 logical rows, 2 of them removed. */
  enum { rows = 4, D = 128 };
  static float table[rows * D];
  for (int i = 0; i < rows * D; ++i) table[i] = (float)(i % 7) - 3.0f;
  static uint8_t packed[rows * 68];
  shapejit_rowwise_prepack_args pa = {SHAPEJIT_Q4, table, SHAPEJIT_F32, rows, D, D, 0, 200, 0.16f};
  if (shapejit_rowwise_prepack(&pa, packed) != SHAPEJIT_OK) { puts(shapejit_last_error()); return 1; }
  const int32_t mapping[6] = {0, -1, 1, 2, -1, 3};
  const int64_t mapping_len = 6;
  const int64_t idx[5] = {0, 1, 5, 3, 2}, off[2] = {0, 3};
  const int64_t n = 5, bags = 2;
  uint16_t out[2 * D];  /* bf16 */
  int64_t offset2bag[5], bag_size[5], max_indices[5];
"""
_Q4_AFTER = r"""
  if (st != SHAPEJIT_OK) { printf("%s: %s\n", shapejit_status_string(st), shapejit_last_error()); return 1; }
  (void)offset2bag; (void)bag_size; (void)max_indices; (void)out;
  return 0;
}
"""

_GROUP_BEFORE = r"""
#include <shapejit/shapejit.hpp>
#include <cmath>
#include <cstdio>
#include <vector>
int main() {
  const int64_t E = 16, H = 2, L = 3, Nb = 2, Dh = E / H;
  std::vector<float> w(3 * E * E), b(3 * E), x(L * Nb * E), q(L * Nb * E), k(L * Nb * E), v(L * Nb * E);
  for (size_t i = 0; i < w.size(); ++i) w[i] = float(int(i % 13) - 6) / 8;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(int(i % 5) - 2) / 4;
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 11) - 5) / 4;
  try {
"""
_GROUP_AFTER = r"""
  } catch (const shapejit::Error& e) {
    std::printf("shapejit::Error: %s\n", e.what());
    return 1;
  }
  // Part p, batch n, head h, position l, column d of a [Nb, H, L, Dh] output, from seq-first rows.
  auto expect = [&](int p, int64_t n, int64_t h, int64_t l, int64_t d, float scale) {
    const int64_t row = p * E + h * Dh + d;
    double acc = b[row];
    for (int64_t c = 0; c < E; ++c) acc += double(x[(l * Nb + n) * E + c]) * w[row * E + c];
    return float(acc) * scale;
  };
  const float qs = 1.0f / std::sqrt(float(Dh));
  const float got[3] = {q[((1 * H + 1) * L + 2) * Dh + 5], k[((0 * H + 1) * L + 1) * Dh + 0], v[((1 * H + 0) * L + 0) * Dh + 7]};
  const float want[3] = {expect(0, 1, 1, 2, 5, qs), expect(1, 0, 1, 1, 0, 1.0f), expect(2, 1, 0, 0, 7, 1.0f)};
  for (int i = 0; i < 3; ++i) {
    if (std::fabs(got[i] - want[i]) > 1e-4f * (1.0f + std::fabs(want[i]))) {
      std::printf("part %d: got %g, expected %g\n", i, double(got[i]), double(want[i]));
      return 1;
    }
  }
  return 0;
}
"""

HARNESSES = {
    "c-q4-pruned": ("c", _Q4_BEFORE, _Q4_AFTER),
    "cpp-mha-in-projection": ("cpp", _GROUP_BEFORE, _GROUP_AFTER),
}


def source_of(sample, readme_path):
    """The translation unit of a C/C++ sample, with #line directives pointing at README.md."""
    readme = os.path.abspath(readme_path).replace("\\", "\\\\")
    body = f'#line {sample.line} "{readme}"\n' + sample.code
    if not sample.harness:
        return body
    includes = [l for l in sample.code.split("\n") if l.lstrip().startswith("#include")]
    fragment = "\n".join("" if l.lstrip().startswith("#include") else l for l in sample.code.split("\n"))
    _, before, after = HARNESSES[sample.harness]
    top = f'#line 1 "readme_samples.py harness {sample.harness} (before)"\n'
    return ("\n".join(includes) + "\n" + top + before + f'#line {sample.line} "{readme}"\n' + fragment +
            f'\n#line 1 "readme_samples.py harness {sample.harness} (after)"\n' + after)


def run_native(readme_path, args):
    """Compiles and runs every C/C++ sample; returns the number that failed."""
    os.makedirs(args.work, exist_ok=True)
    lib = os.path.abspath(args.lib)
    failed, ran = [], 0
    for s in samples(readme_path):
        if s.lang == "python" or (args.only and s.name != args.only):
            continue
        ran += 1
        ext, compiler, std = (".c", args.cc, "-std=c11") if s.lang == "c" else (".cpp", args.cxx, "-std=c++20")
        src = os.path.join(args.work, s.name + ext)
        exe = os.path.join(args.work, s.name)
        with open(src, "w", encoding="utf-8") as f:
            f.write(source_of(s, readme_path))
        cmd = [compiler, std, "-Wall", "-Wextra", "-Werror", "-I", args.include, src, "-o", exe, lib,
               "-Wl,-rpath," + os.path.dirname(lib)]
        build = subprocess.run(cmd, capture_output=True, text=True)
        if build.returncode != 0:
            failed.append(s.name)
            print(f"FAIL {s.name} (README.md:{s.line}): does not compile\n  $ {' '.join(cmd)}\n{build.stdout}{build.stderr}")
            continue
        try:
            result = subprocess.run([exe], capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            failed.append(s.name)
            print(f"FAIL {s.name} (README.md:{s.line}): still running after 120 s")
            continue
        if result.returncode != 0:
            failed.append(s.name)
            print(f"FAIL {s.name} (README.md:{s.line}): exit status {result.returncode}\n{result.stdout}{result.stderr}")
        else:
            print(f"ok   {s.name} (README.md:{s.line}, {s.lang}{', harness ' + s.harness if s.harness else ''})")
    if args.only and ran == 0:
        print(f"no C/C++ sample named '{args.only}'")
        return 1
    if ran == 0:
        print("README.md has no C/C++ sample: nothing was checked")
        return 1
    print(f"{ran - len(failed)} of {ran} C/C++ README samples compiled and ran" +
          (f"; failed: {', '.join(failed)}" if failed else ""))
    return len(failed)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["check", "run"])
    parser.add_argument("readme")
    parser.add_argument("--lib", help="libshapejit.so to link")
    parser.add_argument("--include", help="directory holding shapejit/shapejit.h")
    parser.add_argument("--work", help="scratch directory for sources and executables")
    parser.add_argument("--cc", default="cc")
    parser.add_argument("--cxx", default="c++")
    parser.add_argument("--only", help="run only this sample")
    args = parser.parse_args()
    try:
        found = samples(args.readme)
    except ReadmeError as e:
        print(e)
        return 1
    if args.command == "check":
        for s in found:
            print(f"{s.name:28} {s.lang:7} README.md:{s.line}{'  harness ' + s.harness if s.harness else ''}")
        return 0
    for option in ("lib", "include", "work"):
        if not getattr(args, option):
            parser.error(f"run needs --{option}")
    return 1 if run_native(args.readme, args) else 0


if __name__ == "__main__":
    sys.exit(main())
