#!/usr/bin/env python3
"""Independent reference for pipebench's RNG: splitmix64 seeding + xoshiro256**, written from
the published algorithm with Python integers. Prints the first 8 outputs for each seed given."""
import sys

M = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return x, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M


def stream(seed, n):
    x, s = seed & M, []
    for _ in range(4):
        x, v = splitmix64(x)
        s.append(v)
    out = []
    for _ in range(n):
        out.append((rotl((s[1] * 5) & M, 7) * 9) & M)
        t = (s[1] << 17) & M
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
    return out


for arg in sys.argv[1:]:
    print(" ".join(str(v) for v in stream(int(arg), 8)))
