/** An application on the module path that requires the library by its module names. */
module modulepath.smoke {
  requires io.epp4j.api;
  requires io.epp4j.core;
}
