#!/usr/bin/env python3
"""What sorting each query token's top-k indices by slot would cost on the device, with torch.sort
along the last dimension (a segmented radix sort), timed by CUDA events, median of 50 calls after
5 warm-ups: the other side of bench/NOTES.md v59 item 4 (sorted indices took 0.93-0.97x the
attention time). Shapes: [b * s_q, topk] int32 of bench decode's cases."""
import torch

shapes = {"V3.2 b 128 / tensor-parallel (256 x 2048)": (256, 2048),
          "V4 b 128 main (256 x 128)": (256, 128), "V4 b 128 extra 512 (256 x 512)": (256, 512),
          "peak b 148 (296 x 16384)": (296, 16384)}
print(torch.cuda.get_device_name())
for name, (rows, k) in shapes.items():
    x = torch.randint(0, 2 * max(k, 2048), (rows, k), dtype=torch.int32, device="cuda")
    for _ in range(5):
        torch.sort(x, dim=-1)
    times = []
    for _ in range(50):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        torch.sort(x, dim=-1)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000)
    times.sort()
    print(f"{name:44s} {times[len(times) // 2]:8.1f} us")
