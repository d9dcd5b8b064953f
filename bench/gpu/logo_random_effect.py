"""Leave-one-GPU-out with each training GPU's level as a random effect:
the trees of bench/gpu/logo_study.py fitted on the target less a per-GPU median offset (three
rounds), and a held-out GPU predicted at the training GPUs' average level. Run from the
repository root: python3 bench/gpu/logo_random_effect.py"""
import sys; sys.path.insert(0,'bench/gpu')
import logo_study as L, numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor
def run(op, which='base', iters=3, drop_dev=False):
    d=L.load(op); X,roof=L.feats(d,which)
    if drop_dev:  # only spec-normalised shape features: no absolute device scale
        X=X.drop(columns=[c for c in ['lroof','lcomp','lmem','lbps','lfps'] if c in X.columns])
    fl=d.gpu.map(L.floors(d)).values/1e3; lat=d.Latency.values/1e3
    busy=np.maximum(np.sqrt(np.maximum(lat**2-fl**2,0)),0.05*lat)
    y=np.log(np.maximum(busy/roof,1.0)); g=d.gpu.values
    res={}
    for h in L.GPUS:
        tr=g!=h; te=~tr
        u={k:0.0 for k in set(g[tr])}
        for _ in range(iters):
            off=np.array([u[k] for k in g[tr]])
            m=HistGradientBoostingRegressor(max_iter=300,min_samples_leaf=50).fit(X[tr],y[tr]-off)
            r=y[tr]-m.predict(X[tr])
            for k in u: u[k]=np.median(r[g[tr]==k])
            mu=np.mean(list(u.values())); u={k:v-mu for k,v in u.items()}
        uh=np.exp(np.maximum(m.predict(X[te]),0))
        flh=d.gpu.map(L.floors(d))[tr].min()/1e3
        pred=np.sqrt(flh**2+(roof[te]*uh)**2)
        res[h]=np.mean(np.abs(pred-lat[te])/lat[te])*100
    print(op,which,'random-effect' + (' no-abs' if drop_dev else ''),' '.join(f'{k[:8]}={v:.1f}' for k,v in res.items()),'mean=%.1f'%np.mean(list(res.values())), flush=True)
for op in ['linear','bmm']:
    run(op)
    run(op, drop_dev=True)
