// libshapejit.so is built from shapejit_core (linked whole); this file only gives the shared
// library target a source of its own.
