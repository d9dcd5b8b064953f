"""Leave-one-GPU-out study of the util model's GEMM features, in Python.

A stand-in for `perfcast eval devices --models util` (sklearn's HistGradientBoosting on the
same target: log of busy time over the spec roofline, busy = sqrt(latency^2 - floor^2), floor
the device's 2% latency quantile; its LOGO means match the Rust model's within 0.3 points),
used to test features quickly. Run from the repository root:
    python3 bench/gpu/logo_study.py linear base        # LOGO, the util model's GEMM features
    python3 bench/gpu/logo_study.py linear base in     # in-sample ceiling (80/20 per GPU)
    python3 bench/gpu/logo_study.py bmm "base tileact"  # + the tile cuBLAS really ran (oracle)
    python3 bench/gpu/logo_study.py bmm "base l2 clock" # + L2 and per-clock spec features
    python3 bench/gpu/logo_study.py bmm "base kt"       # + K-loop time per tile and wave
    python3 bench/gpu/logo_study.py bmm base eff        # roofline at each GPU's measured
                                                        #   big-GEMM efficiency (oracle input)
"""
import pandas as pd, numpy as np, glob, json, sys
from sklearn.ensemble import HistGradientBoostingRegressor
R='../shared/data/neusight'
GPUS=['Tesla_P4','Tesla_P100-PCIE-16GB','Tesla_T4','Tesla_V100-PCIE-32GB','NVIDIA_A100-PCIE-40GB']
def spec(g):
    j=json.load(open(f'{R}/device_configs/{g}.json'))
    return dict(peak=j['SingleFLOPs']*1e9,bw=j['Mem_Bw']*1e9,sms=j['Num_Sm'],l2=j['L2Cache']*1e6,clock=j['Freq'])
def load(op):
    out=[]
    for g in GPUS:
        d=pd.read_csv(f'{R}/{op}/{g}.csv')
        d=d[['B','M','N','K','Latency','Kernel Name']].copy()
        d['gpu']=g
        for k,v in spec(g).items(): d[k]=v
        out.append(d)
    return pd.concat(out,ignore_index=True)
TILES=[(128,128),(128,64),(64,64),(32,128),(128,32),(64,32),(32,32)]
def feats(d, which):
    B,M,N,K=[d[c].astype(float).values for c in 'BMNK']
    sms=d.sms.values; peak=d.peak.values; bw=d.bw.values
    flops=2*B*M*N*K; bytes_=4*B*(M*K+K*N+M*N)
    comp=flops/peak; mem=bytes_/bw; roof=np.maximum(comp,mem)
    F={}
    F['lroof']=np.log10(roof*1e6); F['lbps']=np.log2(bytes_/sms)
    F['lcomp']=np.log10(comp*1e6); F['lmem']=np.log10(mem*1e6)
    F['lir']=np.log2(flops/bytes_/(peak/bw))
    F['lB']=np.log2(B);F['lM']=np.log2(M);F['lN']=np.log2(N);F['lK']=np.log2(K)
    F['lfps']=np.log2(flops/sms)
    tiles=TILES[:4] if 'base' in which else TILES
    best=0
    for tm,tn in tiles:
        rows=np.ceil(M/tm);cols=np.ceil(N/tn);t=B*rows*cols
        w=np.maximum(np.ceil(t/sms),1);tail=(t-(w-1)*sms)/sms
        q=M*N/(rows*tm*cols*tn)*t/(w*sms)
        F[f'w{tm}x{tn}']=np.log2(w);F[f't{tm}x{tn}']=tail;F[f'q{tm}x{tn}']=q
        best=np.maximum(best,q)
        if 'kt' in which:
            # time per tile k-loop: per-SM work in one wave relative
            F[f'lktile{tm}x{tn}']=np.log2(w*tm*tn*K*2/(peak/sms)*1e6)
    F['qbest']=best
    F['lkpo']=np.log2(K/np.maximum(B*M*N/sms,1))
    if 'l2' in which:
        F['lws_l2']=np.log2(bytes_/d.l2.values)
    if 'clock' in which:
        F['lfpc']=np.log2(peak/sms/d.clock.values/1e6)  # flops per clock per SM
        F['lbpc']=np.log2(bw/sms/d.clock.values/1e6)
    if 'ridge' in which:
        F['lridge']=np.log2(peak/bw)
    if 'tileact' in which:
        t=d['Kernel Name'].str.extract(r'(\d+)x(\d+)').astype(float).values
        tm,tn=t[:,0],t[:,1]
        rows=np.ceil(M/tm);cols=np.ceil(N/tn);tt=B*rows*cols
        w=np.maximum(np.ceil(tt/sms),1)
        F['a_w']=np.log2(w);F['a_tail']=(tt-(w-1)*sms)/sms;F['a_q']=M*N/(rows*tm*cols*tn)*tt/(w*sms)
        F['a_tm']=tm;F['a_tn']=tn
    return pd.DataFrame(F), roof
def floors(d):
    return d.groupby('gpu').Latency.quantile(0.02)
def run(op, which, holds=GPUS, p=2.0, **kw):
    d=load(op); X,roof=feats(d,which)
    fl=d.gpu.map(floors(d)).values/1e3
    lat=d.Latency.values/1e3
    busy=np.sqrt(np.maximum(lat**2-fl**2,0)) if p==2 else np.maximum(lat-fl,0)
    busy=np.maximum(busy,0.05*lat)
    y=np.log(np.maximum(busy/roof,1.0))
    res={}
    for h in holds:
        tr=d.gpu.values!=h; te=~tr
        m=HistGradientBoostingRegressor(max_iter=kw.get('it',300),learning_rate=0.1,min_samples_leaf=kw.get('leaf',50),max_leaf_nodes=31)
        if h=='ins':
            pass
        m.fit(X[tr],y[tr])
        u=np.exp(np.maximum(m.predict(X[te]),0))
        flh=fl[te].min() if kw.get('ownfloor') else d.gpu.map(floors(d))[tr].min()/1e3
        pred=np.sqrt(flh**2+(roof[te]*u)**2)
        res[h]=np.mean(np.abs(pred-lat[te])/lat[te])*100
    return res
def insample(op, which, p=2.0):
    d=load(op); X,roof=feats(d,which)
    fl=d.gpu.map(floors(d)).values/1e3
    lat=d.Latency.values/1e3
    busy=np.maximum(np.sqrt(np.maximum(lat**2-fl**2,0)),0.05*lat)
    y=np.log(np.maximum(busy/roof,1.0))
    res={}
    rng=np.random.default_rng(0)
    for g in GPUS:
        s=(d.gpu.values==g); idx=np.where(s)[0]; rng.shuffle(idx); n=len(idx)*4//5
        tr,te=idx[:n],idx[n:]
        m=HistGradientBoostingRegressor(max_iter=300,min_samples_leaf=20).fit(X.iloc[tr],y[tr])
        u=np.exp(np.maximum(m.predict(X.iloc[te]),0))
        pred=np.sqrt(fl[te]**2+(roof[te]*u)**2)
        res[g]=np.mean(np.abs(pred-lat[te])/lat[te])*100
    return res
def diag(op,which):
    d=load(op); X,roof=feats(d,which)
    fl=d.gpu.map(floors(d)).values/1e3; lat=d.Latency.values/1e3
    busy=np.maximum(np.sqrt(np.maximum(lat**2-fl**2,0)),0.05*lat)
    y=np.log(np.maximum(busy/roof,1.0))
    for h in GPUS:
        tr=d.gpu.values!=h; te=~tr
        m=HistGradientBoostingRegressor(max_iter=300,min_samples_leaf=50).fit(X[tr],y[tr])
        u=np.exp(np.maximum(m.predict(X[te]),0))
        flh=d.gpu.map(floors(d))[tr].min()/1e3
        pred=np.sqrt(flh**2+(roof[te]*u)**2); r=pred/lat[te]
        big=roof[te]>np.quantile(roof[te],0.5)
        # best constant rescale of kernel part
        print(h[:12],'median ratio %.2f  big-half %.2f small-half %.2f  mape %.1f  | actual eff (roof/lat) on big half median %.2f'%(np.median(r),np.median(r[big]),np.median(r[~big]),np.mean(abs(r-1))*100,np.median(roof[te][big]/lat[te][big])))
def effdev():
    d=load('linear'); X,roof=feats(d,'base'); d['e']=roof/(d.Latency.values/1e3)
    big=d[roof>0.01]  # kernels over 10 ms of roofline
    return big.groupby('gpu').e.quantile(0.9)
def run_eff(op,which,src='linear'):
    d=load(op); X,roof0=feats(d,which)
    e=effdev(); print(e.round(3).to_dict())
    eff=d.gpu.map(e).values
    roof=roof0/eff   # roofline at the device's sustained peak
    X=X.copy(); X['lroof']=np.log10(roof*1e6)
    fl=d.gpu.map(floors(d)).values/1e3; lat=d.Latency.values/1e3
    busy=np.maximum(np.sqrt(np.maximum(lat**2-fl**2,0)),0.05*lat)
    y=np.log(np.maximum(busy/roof,0.3))
    res={}
    for h in GPUS:
        tr=d.gpu.values!=h; te=~tr
        m=HistGradientBoostingRegressor(max_iter=300,min_samples_leaf=50).fit(X[tr],y[tr])
        u=np.exp(np.maximum(m.predict(X[te]),np.log(eff[te])))  # never below spec roofline
        flh=d.gpu.map(floors(d))[tr].min()/1e3
        pred=np.sqrt(flh**2+(roof[te]*u)**2)
        res[h]=np.mean(np.abs(pred-lat[te])/lat[te])*100
    print(op,which,'eff',' '.join(f'{k[:8]}={v:.1f}' for k,v in res.items()),'mean=%.1f'%np.mean(list(res.values())))
if __name__ == '__main__':
    op = sys.argv[1]; which = sys.argv[2]; mode = sys.argv[3] if len(sys.argv) > 3 else 'logo'
    if mode == 'eff':
        run_eff(op, which)
        sys.exit(0)
    r = insample(op, which) if mode == 'in' else run(op, which)
    print(op, which, mode, ' '.join(f'{k[:12]}={v:.1f}' for k, v in r.items()),
          'mean=%.1f' % np.mean(list(r.values())))
