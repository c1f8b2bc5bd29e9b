"""radixkv as a radix-cache backend of SGLang 0.5.23, loaded by SGLang's plugin system.

Installing radixkv adds the entry point ``radixkv = radixkv.integrations.sglang:register`` to the
group ``sglang.srt.plugins``; SGLang's ``load_plugins()`` (run in the scheduler process before
the cache is built) calls :func:`register`, after which ``--radix-cache-backend radixkv`` builds a
:class:`RadixKVPrefixCache`. Nothing in SGLang is patched. ``SGLANG_PLUGINS`` may list
``radixkv`` to load it alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

BACKEND_NAME = "radixkv"

if TYPE_CHECKING:
    from radixkv.integrations.sglang.cache import RadixKVPrefixCache


def register() -> None:
    """Register the ``radixkv`` radix-cache backend with SGLang (idempotent)."""
    from sglang.srt.mem_cache.registry import (
        get_radix_cache_factory,
        register_radix_cache_backend,
    )

    if get_radix_cache_factory(BACKEND_NAME) is None:
        register_radix_cache_backend(BACKEND_NAME, build)


def build(ctx: Any) -> RadixKVPrefixCache:
    """The factory SGLang calls with its ``TreeCacheBuildContext``; refuses, with a
    ``ValueError`` naming the feature, the configurations this backend does not serve."""
    from radixkv.integrations.sglang.cache import RadixKVPrefixCache

    refused = [
        name
        for name, on in (
            ("hybrid sliding-window attention", ctx.is_hybrid_swa),
            ("hybrid SSM / Mamba models", ctx.is_hybrid_ssm),
            ("hierarchical cache (HiCache)", ctx.enable_hierarchical_cache),
            ("DSA sparse attention", getattr(ctx, "is_dsa", False)),
            (
                "--schedule-policy dfs-weight",
                getattr(ctx.server_args, "schedule_policy", None) == "dfs-weight",
            ),
        )
        if on
    ]
    if refused:
        raise ValueError(
            f"--radix-cache-backend {BACKEND_NAME}: not supported with " + ", ".join(refused)
        )
    params = ctx.params
    if ctx.disable_radix_cache:
        params.disable = True
    return RadixKVPrefixCache(params)


def __getattr__(name: str) -> Any:
    # the cache class imports SGLang; load it on first use so `register` stays cheap
    if name == "RadixKVPrefixCache":
        from radixkv.integrations.sglang.cache import RadixKVPrefixCache

        return RadixKVPrefixCache
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["BACKEND_NAME", "RadixKVPrefixCache", "build", "register"]
