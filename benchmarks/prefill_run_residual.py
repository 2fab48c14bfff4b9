"""The held-out rates as whole runs, with and without the batched prefill (issue 34):
which way do the Vidur sets' held-out points lean, and is it the shared arrival seed?

    python benchmarks/prefill_run_residual.py dense [F.csv]   # F: a replayed copy

Per group, the chain law (with or without the batched prefill) is fitted by least squares
in log L to the rates up to 60% of the top rate, and each higher rate whose N stays below
0.8 of the cap is predicted as a new whole run of its own requests
(`ProfileCurve.run_latency`, what the Bayesian held-out check uses). Prints the median
log(measured / predicted) over those points and the share measured above the prediction.
Run on a set replayed with seed 0 shared by every rate and with a seed per rate
(`replay_sets.py --seeds shared:0|independent`), it separates the law's misfit from the
shared seed's.
"""
import sys, numpy as np, pandas as pd, warnings
warnings.filterwarnings("ignore")
from scipy.optimize import least_squares
from bayesspec.prediction import ProfileCurve
from prefill_chain_law import chain_arrays, chain_law
from vidur_sets import profiled_groups
set_, csv = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
out = {False: [], True: []}
for key, group, sizes, times, cap in profiled_groups(set_, csv):
    extra, valid, dec = chain_arrays(key[4], sizes, times, cap)
    rps=group.rps.to_numpy(float); m=group.latency_mean_s.to_numpy(float); n=group.n_requests.to_numpy(float)
    fit=rps<=0.6*rps.max(); held=~fit & (rps*m < 0.8*cap)
    for batched in (False, True):
        def form(th,at):
            c1,c2=np.exp(th); return chain_law(rps[at],c1,c2,cap,extra,valid,dec,min(times[0],0.9*c2) if batched else None)
        th=least_squares(lambda t: np.log(m[fit])-np.log(form(t,fit)), np.log([m.min(),0.5/rps.max()]),diff_step=1e-4).x
        c1,c2=np.exp(th)
        cur=ProfileCurve(np.array([c1]),np.array([c2]),batch_sizes=sizes,iteration_s=times,decode_tokens=float(key[4]),cap=cap,law="chain",prefill_batching=batched)
        run=cur.run_latency(rps[held], n[held])[0]
        out[batched].extend(np.log(m[held]/run))
for b in (False, True):
    r=np.array(out[b]); print(csv or set_, "batched" if b else "chain  ", "held-out N<0.8cap: median log(obs/run pred) %+.4f, share above %.2f, n %d" % (np.median(r), (r>0).mean(), len(r)))
