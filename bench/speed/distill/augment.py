# augment.py BUNDLE N_PER_ROW DST: each conv2d row of the teacher-labelled dataset DST
# (relabel.py) jittered N_PER_ROW times (channels and map size by up to 1.5x, half of them at
# another batch), labelled by BUNDLE's predictions and appended; queries outside the bundle's
# trained ranges (answered by a stand-in) are left out.
import json, sys, subprocess, os, tempfile, numpy as np, pyarrow as pa, pyarrow.parquet as pq
bundle, k, dst = sys.argv[1], int(sys.argv[2]), sys.argv[3]
P=os.environ.get('PERFCAST_BIN', 'perfcast')
t=pq.read_table(f'{dst}/conv2d.parquet')
t = pa.table({n: c.cast(pa.string()) if str(c.type) == "string_view" else c for n, c in zip(t.column_names, t.columns)})
base=t.to_pylist()
rng=np.random.default_rng(1)
def jit(v, lo=1):
    return max(lo, int(round(v*np.exp(rng.uniform(-0.4,0.4)))))
new=[]; specs=[]
seen={tuple((r[c] for c in ('in_channels','out_channels','in_h','kernel_h','stride_h','pad_h','groups','batch','phase'))) for r in base}
for r in base:
    for _ in range(k):
        x=dict(r)
        dw = r['groups']>1 and r['groups']==r['in_channels']==r['out_channels']
        cin=jit(r['in_channels']); cout=cin if dw else jit(r['out_channels'])
        g = cin if dw else (r['groups'] if r['groups']==1 else 1)
        hw=max(r['kernel_h'], jit(r['in_h']))
        if hw + 2*r['pad_h'] < r['kernel_h']: continue
        b=int(rng.choice([1,2,4,8,16,32])) if rng.random()<0.5 else r['batch']
        x.update(in_channels=cin,out_channels=cout,groups=g,in_h=hw,in_w=hw,batch=b)
        key=(cin,cout,hw,r['kernel_h'],r['stride_h'],r['pad_h'],g,b,r['phase'])
        if key in seen: continue
        seen.add(key)
        # forward work cap as the sweeps have it (1 GFLOP)
        oh=(hw+2*r['pad_h']-r['dilation_h']*(r['kernel_h']-1)-1)//r['stride_h']+1
        if oh<1: continue
        fl=2*b*cout*(cin//g)*r['kernel_h']*r['kernel_w']*oh*oh
        if fl>1e9: continue
        new.append(x)
        specs.append({"kind":"conv2d","in_channels":cin,"out_channels":cout,"input_hw":hw,"kernel":[r['kernel_h'],r['kernel_w']],
            "stride":[r['stride_h'],r['stride_w']],"padding":[r['pad_h'],r['pad_w']],"dilation":[r['dilation_h'],r['dilation_w']],
            "groups":g,"bias":bool(r['bias']),"batch":b,"phase":r['phase'],"threads":r['threads']})
specs_file=os.path.join(tempfile.mkdtemp(), 'specs.json')
json.dump(specs, open(specs_file,'w'))
out=subprocess.run([P,'predict','--bundle',bundle,'--modules-file',specs_file,'--format','json'],capture_output=True,text=True)
if out.returncode: print(out.stderr[:2000]); sys.exit(1)
res=json.loads(out.stdout)
preds = res['modules'] if isinstance(res,dict) and 'modules' in res else res
assert len(preds)==len(new), (len(preds), len(new), str(res)[:300])
keep=[]
for x,p in zip(new,preds):
    ms=p['ms'] if isinstance(p,dict) else p
    if p.get('fallback') or p.get('warnings'): continue
    for n in ('median_ms','min_ms','p10_ms','p90_ms'): x[n]=ms
    x['mad_ms']=0.0
    keep.append(x)
allrows=base+keep
tt=pa.Table.from_pylist(allrows, schema=t.schema)
pq.write_table(tt, f'{dst}/conv2d.parquet')
print('added', len(keep), 'of', len(new), 'total', len(allrows))
