"""Feature construction for the per-kernel utilisation model. Only op config + device spec."""
import numpy as np
from common import spec
TILES=[(128,128),(128,64),(64,64),(32,128)]
EW_BIN=['add','mul','div','pow']; EW_SCAL=['addu','mulu','divu','powu']; EW_UN=['gelu','relu','tanh']
FLOP_PER_ELEM={'add':1,'mul':1,'div':1,'pow':1,'addu':1,'mulu':1,'divu':1,'powu':1,'relu':1,'gelu':8,'tanh':8,'ln':8,'softmax':5}

def gemm_dims(op,d):
    if op=='linear':  # (B,M,N)->Linear(N->K): rows B*M, reduction N, out K, batch 1
        return np.ones(len(d)), (d.B*d.M).values.astype(float), d.N.values.astype(float), d.K.values.astype(float)
    return d.B.values.astype(float), d.M.values.astype(float), d.N.values.astype(float), d.K.values.astype(float)

def roofline(op,d,s):
    """returns flops, bytes, roofline time (s) with the plain spec roofline."""
    if op in('linear','bmm'):
        bat,m,kr,n=gemm_dims(op,d)
        fl=2*bat*m*kr*n
        by=4*bat*(m*kr+kr*n+m*n)+(4*n if op=='linear' else 0)
        peak=s['peak_mm']
    else:
        ne=(d.B*d.H).values.astype(float)
        if op in EW_BIN: by=4*3*ne
        elif op in EW_SCAL or op in EW_UN: by=4*2*ne
        elif op=='ln': by=4*(2*ne+2*d.H.values+2*d.B.values)
        elif op=='softmax': by=4*2*ne
        fl=FLOP_PER_ELEM[op]*ne
        peak=s['peak_vec']
    rt=np.maximum(fl/peak,by/s['bw'])
    return fl,by,rt

def features(op,d,s):
    fl,by,rt=roofline(op,d,s)
    sm=s['sm']; ridge=s['peak_mm' if op in('linear','bmm') else 'peak_vec']/s['bw']
    F={}
    F['log_rt_us']=np.log10(rt*1e6)
    if op in('linear','bmm'):   # for element-wise ops these are constant per device = device identifiers
        F['log_flop_t_us']=np.log10(fl/s['peak_mm']*1e6)
        F['log_mem_t_us']=np.log10(by/s['bw']*1e6)
        F['log_ai_over_ridge']=np.log2(fl/by/ridge)
    F['log_bytes_per_sm']=np.log2(by/sm)
    F['log_l2fit']=np.log2(by/s['l2'])
    if op in('linear','bmm'):
        bat,m,kr,n=gemm_dims(op,d)
        F['log_bat']=np.log2(bat); F['log_m']=np.log2(m); F['log_n']=np.log2(n); F['log_k']=np.log2(kr)
        F['log_flops_per_sm']=np.log2(fl/sm)
        F['log_ws_per_batch_l2']=np.log2(4*(m*kr+kr*n+m*n)/s['l2'])
        F['log_ws_ab_l2']=np.log2(4*bat*(m*kr+kr*n)/s['l2'])
        best=np.zeros(len(d))
        for tm,tn in TILES:
            tiles=bat*np.ceil(m/tm)*np.ceil(n/tn)
            waves=np.ceil(tiles/sm)
            tail=(tiles-(waves-1)*sm)/sm
            pad=(m*n)/(np.ceil(m/tm)*tm*np.ceil(n/tn)*tn)
            weff=tiles/(waves*sm)
            key=f'{tm}x{tn}'
            F[f'log_waves_{key}']=np.log2(waves)
            F[f'tail_{key}']=tail
            F[f'qeff_{key}']=pad*weff
            best=np.maximum(best,pad*weff)
            # tile-level traffic with no L2 reuse vs compute: 2*(1/tm+1/tn)*ridge (per element of K)
        F['qeff_best']=best
        F['log_k_over_mn_per_sm']=np.log2(kr/np.maximum(bat*m*n/sm,1))
    else:
        ne=(d.B*d.H).values.astype(float)
        F['log_ne']=np.log2(ne)
        F['log_elem_per_thread_slot']=np.log2(ne/(sm*2048))
        blocks=np.ceil(ne/512)
        F['log_blocks_per_sm']=np.log2(blocks/sm)
        if op in('ln','softmax'):
            F['log_B']=np.log2(d.B.values.astype(float)); F['log_H']=np.log2(d.H.values.astype(float))
            F['log_rows_per_sm']=np.log2(d.B.values/sm)
            rw=np.ceil(d.B.values/sm); F['row_tail']=(d.B.values-(rw-1)*sm)/sm
    names=list(F.keys())
    return np.column_stack([F[k] for k in names]).astype(float), names, rt
