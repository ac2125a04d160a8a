/* shapejit version: the one place it is written. CMake (project VERSION), setup.py and the
 * PyTorch extension read these lines, so keep each macro on one line of this form.
 * shapejit_version() returns the library's SHAPEJIT_VERSION, so a program can compare the header
 * it was compiled with against the library it runs with. */
#ifndef SHAPEJIT_VERSION_H
#define SHAPEJIT_VERSION_H

#define SHAPEJIT_VERSION_MAJOR 0
#define SHAPEJIT_VERSION_MINOR 2
#define SHAPEJIT_VERSION_PATCH 0
#define SHAPEJIT_VERSION_STRING "0.2.0"

/* One comparable number: major * 10000 + minor * 100 + patch (0.2.0 is 200). */
#define SHAPEJIT_VERSION \
  (SHAPEJIT_VERSION_MAJOR * 10000 + SHAPEJIT_VERSION_MINOR * 100 + SHAPEJIT_VERSION_PATCH)

#endif
