"""Prints where `cmake --install` puts the shapejit Python package, relative to the install prefix
given as argv[1]: the first directory on this interpreter's sys.path under the prefix (Debian:
lib/python3.X/dist-packages under /usr/local, lib/python3/dist-packages under /usr), else the
interpreter's standard lib/python3.X/site-packages layout (a prefix the user puts on PYTHONPATH)."""
import os
import sys
import sysconfig

prefix = os.path.normpath(os.path.abspath(sys.argv[1]))
for entry in sys.path:
    entry = os.path.normpath(os.path.abspath(entry)) if entry else ""
    relative = os.path.relpath(entry, prefix) if entry.startswith(prefix + os.sep) else ""
    # lib/... only: under /usr, /usr/local/lib/... is another prefix's directory.
    if relative.startswith("lib") and relative.endswith(("dist-packages", "site-packages")):
        print(relative)
        break
else:
    purelib = sysconfig.get_path("purelib", "posix_prefix", {"base": prefix, "platbase": prefix})
    print(os.path.relpath(purelib, prefix))
