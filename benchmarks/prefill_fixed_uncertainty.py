"""Would the batched prefill's fixed part as a parameter widen the held-out predictions
enough to cover Vidur's sets (issue 34)? Its spread, by least squares.

    python benchmarks/prefill_fixed_uncertainty.py dense [F.csv]

The seventh session proposed a, the prefill iteration's part paid once, as a parameter
with t_d(1) as its prior (log-sd 0.5) instead of the constant a = t_d(1). Per group, a is
set to t_d(1) exp(-0.5), t_d(1) and t_d(1) exp(+0.5) (the prior's +-1 sd), C1 and C2 are
fitted by least squares in log L to the rates up to 60% of the top rate at each, and the
higher rates whose N stays below 0.8 of the cap are predicted as whole runs
(`ProfileCurve.run_latency`, its fixed part swapped for the given a). Printed: how far
the fitted points' sum of squares moves with a (whether the data pin it), the median
half-spread of the held-out predictions over the three, and the share of measured
held-out means inside that spread.
"""
import sys, numpy as np, warnings
warnings.filterwarnings("ignore")
from scipy.optimize import least_squares
from bayesspec.laws import _profile_time, profile_chain_extra
from bayesspec.prediction import ProfileCurve
from prefill_chain_law import chain_law
from vidur_sets import profiled_groups
set_, csv = sys.argv[1], (sys.argv[2] if len(sys.argv) > 2 else None)
mults=np.exp(np.array([-1.0,0.0,1.0])*0.5)
spread=[];rss_change=[];inside=[]
for key, group, sizes, times, cap in profiled_groups(set_, csv):
    capn=int(cap); extra=profile_chain_extra(float(key[4]),sizes,times,capn); valid=np.ones(capn)
    dec=_profile_time(np.arange(1.,capn+1),sizes,times)
    rps=group.rps.to_numpy(float); m=group.latency_mean_s.to_numpy(float); n=group.n_requests.to_numpy(float)
    fit=rps<=0.6*rps.max(); held=~fit & (rps*m < 0.8*cap)
    if not held.any(): continue
    preds=[];rss=[]
    for k in mults:
        a=k*times[0]
        f=lambda t: np.log(m[fit])-np.log(chain_law(rps[fit],*np.exp(t),cap,extra,valid,dec,min(a,0.9*np.exp(t[1]))))
        sol=least_squares(f,np.log([m.min(),0.5/rps.max()]),diff_step=1e-4)
        c1,c2=np.exp(sol.x); rss.append(np.sum(sol.fun**2))
        # the package's curve at these costs, its fixed part the given a
        cur=ProfileCurve(np.array([c1]),np.array([c2]),batch_sizes=sizes,iteration_s=times,decode_tokens=float(key[4]),cap=cap,law="chain",prefill_batching=True)
        cur._prefill_fixed=lambda c, a=a: np.minimum(a, 0.9*c)
        preds.append(cur.run_latency(rps[held],n[held])[0])
    preds=np.array(preds)
    spread.extend(0.5*np.log(preds[2]/preds[0]))
    lo,hi=np.minimum(preds[0],preds[2]),np.maximum(preds[0],preds[2])
    inside.extend((m[held]>=lo)&(m[held]<=hi))
    rss_change.append((rss[0]-rss[1], rss[2]-rss[1], len(m[fit])))
r=np.array(rss_change)
print(csv or set_, "held-out points", len(spread), "median half-spread of run prediction over a in t_d1*exp(+-0.5): %.4f"%np.median(np.abs(spread)), "measured inside the a-range: %.2f"%np.mean(inside))
print("  fitted RSS change a x0.61: median %.2e, a x1.65: median %.2e (fitted points per group median %d; a 1%% error per point is 1e-4)"%(np.median(r[:,0]),np.median(r[:,1]),np.median(r[:,2])))
