// A shared library that exports none of the Strata entry points (everything here has hidden visibility).
namespace {

int unused() {
  return 42;
}

}  // namespace

int strataTestNotAPlugin() {
  return unused();
}
