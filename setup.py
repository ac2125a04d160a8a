"""Builds the shapejit Python package: the modules in python/shapejit and the PyTorch extension
libshapejit_torch_ops.so, which CMake builds from this repository against the installed torch.

    pip install --no-build-isolation .

Environment: CMAKE_BUILD_PARALLEL_LEVEL (jobs; CMake reads it), SHAPEJIT_CMAKE_BUILD_DIR (an
already configured build directory of this repository whose shapejit_torch_ops target is built
and shipped instead of configuring a fresh one), SHAPEJIT_CMAKE_ARGS (extra configure arguments).
ccache is used as the compiler launcher when it is installed.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
EXTENSION = "shapejit.libshapejit_torch_ops"
LIBRARY_NAME = "libshapejit_torch_ops.so"
# setuptools' scratch space: one directory that .gitignore covers (/build*/), not build/, which
# is the CMake build of tools/test.sh, and no egg-info beside the package.
SCRATCH = "build-pip"


def read_version():
    """MAJOR.MINOR.PATCH from include/shapejit/version.h, the one place the version is written."""
    text = (ROOT / "include" / "shapejit" / "version.h").read_text()
    parts = []
    for part in ("MAJOR", "MINOR", "PATCH"):
        match = re.search(r"^#define SHAPEJIT_VERSION_{} (\d+)$".format(part), text, re.MULTILINE)
        if not match:
            raise RuntimeError("include/shapejit/version.h lacks a '#define SHAPEJIT_VERSION_{} <number>' "
                               "line".format(part))
        parts.append(match.group(1))
    return ".".join(parts)


def progress_terminal():
    """The user's terminal when pip hides our output (it does unless -v), else None: the build
    takes minutes, and a silent pip looks hung."""
    if sys.stdout.isatty():
        return None
    try:
        return open("/dev/tty", "w")
    except OSError:
        return None


def torch_requirement():
    """The torch this build runs against, as a requirement of the wheel: the extension links
    torch's C++ libraries, whose ABI holds within a minor release only, so a wheel built against
    torch X.Y requires torch==X.Y.* (any patch release and build, e.g. +cpu). Without torch
    (an sdist built elsewhere) it is plain "torch"."""
    try:
        import torch
    except ImportError:
        return "torch"
    release = re.match(r"(\d+)\.(\d+)", torch.__version__)
    if not release:
        raise RuntimeError("cannot read torch's version {!r} as X.Y...".format(torch.__version__))
    return "torch=={}.{}.*".format(release.group(1), release.group(2))


def run(command, cwd=None):
    """Runs command, its output going to ours (pip -v shows it); each Ninja step "[k/n] ..." is
    also shown on one line of the terminal, when there is one."""
    print("setup.py: " + " ".join(shlex.quote(str(c)) for c in command), flush=True)
    tty = progress_terminal()
    process = subprocess.Popen([str(c) for c in command], cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, errors="replace")
    for line in process.stdout:
        sys.stdout.write(line)
        step = re.match(r"\[(\d+)/(\d+)\] (.*)", line)
        if tty and step:
            tty.write("\rshapejit build [{}/{}] {:<60.60}".format(step[1], step[2], step[3].split("/")[-1]))
            tty.flush()
    sys.stdout.flush()
    if tty:
        tty.write("\n")
        tty.close()
    if process.wait() != 0:
        raise subprocess.CalledProcessError(process.returncode, command)


class CMakeBuild(build_ext):
    """Builds the extension with CMake (target shapejit_torch_ops only) and copies it into the
    package, under its own name (libshapejit_torch_ops.so, which shapejit/_library.py loads)."""

    def get_ext_filename(self, fullname):
        # Called with the dotted name and, by get_ext_fullpath, with its last part alone.
        parts = fullname.split(".")
        if parts[-1] == EXTENSION.split(".")[-1]:
            return os.path.join(*parts[:-1], LIBRARY_NAME)
        return super().get_ext_filename(fullname)

    def build_extension(self, ext):
        if ext.name != EXTENSION:
            return super().build_extension(ext)
        reused = os.environ.get("SHAPEJIT_CMAKE_BUILD_DIR")
        build_dir = Path(reused).resolve() if reused else Path(self.build_temp).resolve() / "cmake"
        if reused:
            if not (build_dir / "CMakeCache.txt").is_file():
                raise RuntimeError("SHAPEJIT_CMAKE_BUILD_DIR={} is not a configured CMake build directory "
                                   "(no CMakeCache.txt)".format(reused))
        else:
            self.configure(build_dir)
        command = ["cmake", "--build", build_dir, "--target", "shapejit_torch_ops"]
        if self.parallel:
            command += ["--parallel", self.parallel]
        run(command)
        built = build_dir / "python" / LIBRARY_NAME
        if not built.is_file():
            raise RuntimeError("CMake did not produce {} (was libtorch found? see the configure output "
                               "above)".format(built))
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(built, target)
        shutil.copymode(built, target)

    def configure(self, build_dir):
        if shutil.which("cmake") is None:
            raise RuntimeError("building shapejit needs cmake (apt-get install cmake)")
        try:
            import torch  # noqa: F401  (the torch this package will run with: build against it)
        except ImportError:
            raise RuntimeError(
                "building shapejit needs torch importable by {} (the torch it will run with). Install "
                "torch first (e.g. pip install torch==2.13.0), then pip install --no-build-isolation . "
                "(build isolation would build against another torch than yours)".format(sys.executable))

        cache = build_dir / "CMakeCache.txt"
        if cache.is_file() and "CMAKE_HOME_DIRECTORY:INTERNAL={}\n".format(ROOT) not in cache.read_text():
            shutil.rmtree(build_dir)  # configured for a source tree that has since moved: start over

        command = ["cmake", "-S", ROOT, "-B", build_dir, "-DCMAKE_BUILD_TYPE=Release",
                   "-DSHAPEJIT_BUILD_TESTS=OFF", "-DSHAPEJIT_BUILD_BENCH=OFF", "-DSHAPEJIT_BUILD_TOOLS=OFF",
                   "-DSHAPEJIT_ORACLE=ON", "-DSHAPEJIT_REQUIRE_ORACLE=ON",
                   # cmake/find_torch.cmake builds against this interpreter's torch.
                   "-DSHAPEJIT_PYTHON=" + sys.executable]
        if shutil.which("ninja") and not (build_dir / "CMakeCache.txt").is_file():
            command += ["-G", "Ninja"]
        if shutil.which("ccache"):
            command += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        command += shlex.split(os.environ.get("SHAPEJIT_CMAKE_ARGS", ""))
        run(command)


# Guarded so the tests can load read_version() without building (pip runs this as __main__).
if __name__ == "__main__":
    os.makedirs(SCRATCH, exist_ok=True)  # egg_info wants its base to exist (pip runs us in ROOT)
    setup(
        version=read_version(),
        install_requires=[torch_requirement()],
        package_dir={"": "python"},
        packages=["shapejit", "shapejit.torchrec"],  # every module of python/shapejit, as cmake --install ships
        ext_modules=[Extension(EXTENSION, sources=[])],
        cmdclass={"build_ext": CMakeBuild},
        options={"build": {"build_base": SCRATCH}, "egg_info": {"egg_base": SCRATCH}},
    )
