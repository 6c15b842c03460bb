"""The CPU memory window both inference peers (torch, JAX) report as memory_mb: the growth of
the peak resident size over the timed passes, as pipebench's own engine reports it."""
import resource


def _status_kib(key):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return float(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux


def rss_mark():
    """Starts a CPU memory window: the peak resident size is reset where Linux allows
    (clear_refs 5); returns the baseline in KiB. memory_mb on the CPU is the growth of the peak
    over the timed passes, as pipebench's engine reports it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    return _status_kib("VmHWM")


def rss_growth_bytes(mark_kib):
    return max(0.0, _status_kib("VmHWM") - mark_kib) * 1024
