# Sourced by the tests of what is installed (tests/consumer/test_consumer.sh,
# tests/python_wheel_test.sh): hide_trees BUILD SOURCE sets the array `hide` to a command
# prefix that runs its command with a tmpfs over each of the two folders (a mount
# namespace of that command only), so that nothing of the build or source tree can be
# found; as another user than root, or without unshare, `hide` stays empty. It returns 1
# then, so the caller can say what it runs with.
hide=()
hide_trees() {
  if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
    hide=(unshare -m sh -c 'mount -t tmpfs none "$1" && mount -t tmpfs none "$2" && shift 2 && exec "$@"'
          sh "$1" "$2")
    return 0
  fi
  return 1
}
