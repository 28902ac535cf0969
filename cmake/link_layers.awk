# Reads "object rank layer backend" lines (first file; backend "-" outside src/backends/, "*" for the
# generated lists that name every backend), then `nm -P -A` output of the same objects; prints one
# line per (layer, symbol) where an object refers to a symbol that no object of its own or a lower
# layer defines but one of a higher layer does, and one per (backend, symbol) where a backend's object
# refers to a symbol that only another backend defines. Used by CheckLinkLayers.cmake.
FNR == NR { rank[$1] = $2; layer[$1] = $3; backend[$1] = $4; next }
{
  obj = $1; sub(/:$/, "", obj)
  sym = $2; type = $3
  if (!(obj in rank)) next
  r = rank[obj] + 0
  if (type == "U") {
    key = obj SUBSEP sym
    if (!(key in undefined)) { undefined[key] = 1; users[++n] = key }
  } else if (type ~ /^[TDBRWVGSIiu]$/) {
    if (!(sym in lowest) || r < lowest[sym]) { lowest[sym] = r; definer[sym] = layer[obj] ": " obj }
    b = backend[obj]
    if (b == "-" || b == "*") common[sym] = 1
    else { defined_by[sym, b] = 1; backend_definer[sym] = "the " b " backend: " obj }
  }
}
END {
  for (i = 1; i <= n; i++) {
    split(users[i], part, SUBSEP)
    obj = part[1]; sym = part[2]
    if ((sym in lowest) && lowest[sym] > rank[obj] + 0) {
      user = obj; sub(/^.*\/mixtrain(_backend_[a-z0-9_]+)?\.dir\//, "", user); gsub(/\.\//, "", user)
      def = definer[sym]; sub(/[^ ]*\/mixtrain(_backend_[a-z0-9_]+)?\.dir\//, "", def); gsub(/\.\//, "", def)
      line = "  " layer[obj] " (" user ") uses " sym "\n      defined in " def
      if (!(line in shown)) { shown[line] = 1; print line }
    }
    b = backend[obj]
    if (b != "-" && b != "*" && (sym in backend_definer) && !(sym in common) && !((sym, b) in defined_by)) {
      user = obj; sub(/^.*\/mixtrain_backend_[a-z0-9_]+\.dir\//, "", user); gsub(/\.\//, "", user)
      def = backend_definer[sym]; sub(/[^ ]*\/mixtrain_backend_[a-z0-9_]+\.dir\//, "", def); gsub(/\.\//, "", def)
      line = "  the " b " backend (" user ") uses " sym "\n      defined only in " def
      if (!(line in shown)) { shown[line] = 1; print line }
    }
  }
}
