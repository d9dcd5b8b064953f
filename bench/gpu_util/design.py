"""perfcast GPU utilisation model: design + evaluation. Run: OMP_NUM_THREADS=1 python3 design.py [--fast]
pred_latency = roofline(spec,op) / util,  util = exp(-max(g(x),0)) in (0,1],  g = GBDT on log(lat/roofline).
"""
import sys, time, json
from common import *
from feats import *
from sklearn.ensemble import HistGradientBoostingRegressor as HGB
SEED=0
PARAMS=dict(max_iter=200,learning_rate=0.1,max_leaf_nodes=31,min_samples_leaf=50,l2_regularization=1.0,max_bins=255)
A100='NVIDIA_A100-PCIE-40GB'; P4='Tesla_P4'
_cache={}
def data(op,g):
    k=(op,g)
    if k not in _cache:
        d=load(op,g)
        if d is None: _cache[k]=None
        else:
            x,names,rt=features(op,d,spec(g)); _cache[k]=(x,rt,d.lat.values,names)
    return _cache[k]
def stack(op,gpus):
    parts=[data(op,g) for g in gpus]; parts=[(p,g) for p,g in zip(parts,gpus) if p is not None]
    X=np.vstack([p[0] for p,_ in parts]); rt=np.concatenate([p[1] for p,_ in parts]); lat=np.concatenate([p[2] for p,_ in parts])
    g=np.concatenate([[gg]*len(p[1]) for p,gg in parts]); return X,rt,lat,g
FLOOR_Q=0.02; FLOOR_RULE='min'; PNORM=2.0
for a in sys.argv[1:]:
    if a.startswith('--floor='): FLOOR_RULE=a.split('=')[1]
    if a.startswith('--p='): PNORM=float(a.split('=')[1])
USE_FLOOR=FLOOR_RULE!='none'
def gpu_floor(op,g): return float(np.quantile(data(op,g)[2],FLOOR_Q))
class Model: pass
P_GRID=[1.0,2.0,4.0]
def fit(op,gpus,floor=None,pn=None,sub=1):
    '''pn: floor/busy combination exponent; None = choose from P_GRID by inner leave-one-GPU-out on the training GPUs'''
    if pn is None:
        sc=[np.mean([ev(fit(op,[h for h in gpus if h!=v],floor,q,sub=3),op,v,count=False) for v in gpus]) for q in P_GRID]
        pn=P_GRID[int(np.argmin(sc))]
    PN=pn
    floor=USE_FLOOR if floor is None else floor
    X,rt,lat,g=stack(op,gpus); X,rt,lat,g=X[::sub],rt[::sub],lat[::sub],g[::sub]; w=np.ones(len(rt)); f=np.zeros(len(rt)); fl={}
    for gg in np.unique(g):
        s=g==gg; w[s]=len(rt)/(np.sum(s)*len(np.unique(g)))   # each GPU weighs the same
        if floor: fl[gg]=gpu_floor(op,gg); f[s]=fl[gg]
    busy=np.maximum((lat**PN-f**PN),(0.05*lat)**PN)**(1/PN)   # busy time: lat = (floor^p + busy^p)^(1/p)
    w=w*np.clip(busy/lat,0.05,1.0)       # floor-dominated rows say little about utilisation
    y=np.log(busy/rt)
    m=Model(); m.pn=PN; m.gb=HGB(random_state=SEED,**PARAMS); m.gb.fit(X,y,sample_weight=w)
    v=np.array(sorted(fl.values())) if floor else np.zeros(1)
    m.floor={'median':np.median(v),'min':v.min(),'gmean':np.exp(np.mean(np.log(np.maximum(v,1e-9))))}[FLOOR_RULE] if floor else 0.0
    return m
def predict(m,op,g):
    X,rt,lat,_=data(op,g); busy=rt*np.exp(np.maximum(m.gb.predict(X),0.0)); p=(m.floor**m.pn+busy**m.pn)**(1/m.pn)   # util clamp (0,1]
    return p,lat,rt
def mape(p,l): return 100*np.mean(np.abs(p-l)/l)
BELOW=[0]; NEVAL=[0]
def ev(m,op,g,count=True):
    p,l,rt=predict(m,op,g)
    if not count: return mape(p,l)
    BELOW[0]+=int(np.sum(p<rt*(1-1e-12))); NEVAL[0]+=len(p); return mape(p,l)
# ---- baseline: plain roofline / constant efficiency per op (MAPE-optimal on training GPUs)
def base_fit(op,gpus):
    _,rt,lat,_=stack(op,gpus); es=np.exp(np.linspace(np.log(1e-4),0,400))
    return es[int(np.argmin([np.mean(np.abs(rt/e-lat)/lat) for e in es]))]
def base_ev(e,op,g): _,rt,lat,_=data(op,g); return mape(rt/e,lat)

def consistency():
    """linear vs bmm efficiency on similar GEMMs (2*b*m*k*n in [1e9,1e11], AI/ridge>=1): a device whose
    log(eff_lin/eff_bmm) departs from the median over the other devices by > log(1.5) is flagged."""
    r={}
    for g in NV:
        v=[]
        for op in('linear','bmm'):
            d=load(op,g); s=spec(g); fl,by,rt=roofline(op,d,s)
            sel=(fl>=1e9)&(fl<=1e11)&(fl/by>=s['peak_mm']/s['bw'])
            v.append(np.median(rt[sel]/d.lat.values[sel]))
        r[g]=(v[0],v[1],np.log(v[0]/v[1]))
    flags={}
    for g in NV:
        others=np.median([r[h][2] for h in NV if h!=g]); dev=r[g][2]-others
        flags[g]=abs(dev)>np.log(1.5)
        print(f'  {SHORT[g]:5s} eff_linear {r[g][0]:.3f} eff_bmm {r[g][1]:.3f} log-ratio {r[g][2]:+.2f} vs others {others:+.2f} -> {"FLAG" if flags[g] else "ok"}')
    # second symptom: long-kernel collapse within the linear file (efficiency of the longest
    # kernels against mid-length compute-bound ones)
    for g in NV:
        d=load('linear',g); s=spec(g); fl,by,rt=roofline('linear',d,s); e=rt/d.lat.values; cb=fl/by>=s['peak_mm']/s['bw']
        cb&=fl>1e10; L=d.lat.values
        print(f'  {SHORT[g]:5s} linear duration decay: eff(lat>=30ms) {np.median(e[cb&(L>=0.03)]):.3f} / eff(1-10ms) {np.median(e[cb&(L>1e-3)&(L<1e-2)]):.3f}')
    return flags

if __name__=='__main__':
    T0=time.time()
    print('== consistency check'); flags=consistency()
    TR4=[g for g in NV if g!=A100]
    print('\n== Split 1: train P4,P100,T4,V100 -> A100 (MAPE %)')
    rows=[]
    for op in ['linear','bmm']+EW:
        variants=[('all',TR4)]
        if op=='linear': variants.append(('noP4lin',[g for g in TR4 if not flags.get(g)]))
        for tag,tr in variants:
            m=fit(op,tr); e=base_fit(op,tr)
            rows.append((op,tag,ev(m,op,A100),base_ev(e,op,A100),e))
            print(f'  {op:8s} {tag:8s} model {rows[-1][2]:6.1f} (p={m.pn:g}, floor={m.floor*1e6:.1f}us)   baseline(eff={e:.3f}) {rows[-1][3]:6.1f}   [{time.time()-T0:.0f}s]',flush=True)
    print('\n== Split 2: train 5 NVIDIA -> MI100, MI210 (element-wise, ln, softmax)')
    for op in EW:
        m=fit(op,NV); e=base_fit(op,NV)
        print(f'  {op:8s} (p={m.pn:g}, floor={m.floor*1e6:.1f}us) model MI100 {ev(m,op,AMD[0]):6.1f} MI210 {ev(m,op,AMD[1]):6.1f}   baseline MI100 {base_ev(e,op,AMD[0]):6.1f} MI210 {base_ev(e,op,AMD[1]):6.1f}',flush=True)
    print('\n== Split 3: leave-one-GPU-out, NVIDIA')
    for op,tag in [('linear','all'),('linear','noP4lin'),('bmm','all')]:
        res=[];bres=[]
        for test in NV:
            tr=[g for g in NV if g!=test and not (tag=='noP4lin' and flags.get(g))]
            m=fit(op,tr); e=base_fit(op,tr); res.append(ev(m,op,test)); bres.append(base_ev(e,op,test))
        print(f'  {op:7s} {tag:8s} model  '+' '.join(f'{SHORT[g]} {r:5.1f}' for g,r in zip(NV,res))+f'  mean {np.mean(res):5.1f}  mean excl P4 {np.mean(res[1:]):5.1f}')
        print(f'  {op:7s} {tag:8s} base   '+' '.join(f'{SHORT[g]} {r:5.1f}' for g,r in zip(NV,bres))+f'  mean {np.mean(bres):5.1f}',flush=True)
    print(f'\n== predictions below spec roofline: {BELOW[0]} of {NEVAL[0]} evaluated rows   total {time.time()-T0:.0f}s')
