# Reads "object rank layer" lines (first file), then `nm -P -A` output of the same objects; prints
# one line per (layer, symbol) where an object refers to a symbol that no object of its own or a
# lower layer defines but one of a higher layer does. Used by CheckLinkLayers.cmake.
FNR == NR { rank[$1] = $2; layer[$1] = $3; next }
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
  }
}
END {
  for (i = 1; i <= n; i++) {
    split(users[i], part, SUBSEP)
    obj = part[1]; sym = part[2]
    if ((sym in lowest) && lowest[sym] > rank[obj] + 0) {
      user = obj; sub(/^.*\/mixtrain\.dir\//, "", user); gsub(/\.\//, "", user)
      def = definer[sym]; sub(/[^ ]*\/mixtrain\.dir\//, "", def); gsub(/\.\//, "", def)
      line = "  " layer[obj] " (" user ") uses " sym "\n      defined in " def
      if (!(line in shown)) { shown[line] = 1; print line }
    }
  }
}
