"""Adapters that let serving engines load radixkv as their prefix cache.

``radixkv.integrations.sglang``: a radix-cache backend for SGLang 0.5.23, registered by SGLang's
plugin loader through the ``sglang.srt.plugins`` entry point. Importing this package imports no
engine; each adapter imports its engine on first use.
"""
