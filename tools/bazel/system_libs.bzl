"""Wraps libraries installed by Debian `-dev` packages (deploy/setup.sh) as cc_library targets.

Headers live in /usr/include, already on the toolchain's include path, so a library only needs its
preprocessor defines and link options. Those come from `pkg-config` where the package ships a .pc file,
otherwise from the explicit attributes.
"""

def _run_pkg_config(ctx, flag):
    if not ctx.attr.modules:
        return []
    result = ctx.execute(["pkg-config", flag] + ctx.attr.modules)
    if result.return_code != 0:
        fail("pkg-config %s %s failed (run deploy/setup.sh): %s" %
             (flag, " ".join(ctx.attr.modules), result.stderr))
    return [f for f in result.stdout.strip().split(" ") if f]

def _system_library_impl(ctx):
    defines = list(ctx.attr.defines)
    for flag in _run_pkg_config(ctx, "--cflags"):
        if flag.startswith("-D"):
            defines.append(flag[2:])

        # -I/usr/include and -pthread need nothing here; the toolchain has them.
    linkopts = _run_pkg_config(ctx, "--libs") + list(ctx.attr.linkopts)
    ctx.file("BUILD.bazel", """\
cc_library(
    name = "{name}",
    defines = {defines},
    linkopts = {linkopts},
    visibility = ["//visibility:public"],
)
""".format(name = ctx.attr.target_name, defines = repr(defines), linkopts = repr(linkopts)))

system_library = repository_rule(
    implementation = _system_library_impl,
    attrs = {
        "modules": attr.string_list(doc = "pkg-config module names"),
        "defines": attr.string_list(doc = "extra preprocessor defines"),
        "linkopts": attr.string_list(doc = "extra link options"),
        "target_name": attr.string(default = "lib"),
    },
    local = True,
    environ = ["PKG_CONFIG_PATH"],
)
