"""vllm.platforms.current_platform (vllm-0.33.0: platforms/__init__.py, interface.py:231): the GPU build's
platform, whose sleep mode exists; a test sets SLEEP_MODE = False to play a platform without it (the CPU
build)."""

SLEEP_MODE = True


class _Platform:
    def is_sleep_mode_available(self) -> bool:
        return SLEEP_MODE

    def is_cpu(self) -> bool:                 # the GPU build's platform
        return False


current_platform = _Platform()
