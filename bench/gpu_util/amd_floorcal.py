"""Supplement to split 2: same NVIDIA-trained models, but the launch floor replaced by the target device's own
measured floor (2% latency quantile of that op on that device = a one-number host calibration). Isolates the
utilisation model from the host launch overhead, which no spec field predicts."""
from design import *
for op in EW:
    m=fit(op,NV); out=[]
    for g in AMD:
        f0=m.floor; m.floor=gpu_floor(op,g); out.append(ev(m,op,g,count=False)); m.floor=f0
    print(f'  {op:8s} (p={m.pn:g}) floor-calibrated  MI100 {out[0]:5.1f}  MI210 {out[1]:5.1f}',flush=True)
