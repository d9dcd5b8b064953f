import pandas as pd, numpy as np, json, os
D=os.environ.get('NEUSIGHT', os.path.join(os.path.dirname(os.path.abspath(__file__)), '../../../shared/data/neusight'))
NV=['Tesla_P4','Tesla_P100-PCIE-16GB','Tesla_T4','Tesla_V100-PCIE-32GB','NVIDIA_A100-PCIE-40GB']
AMD=['AMD_Instinct_MI100','AMD_Instinct_MI210']
SHORT={'Tesla_P4':'P4','Tesla_P100-PCIE-16GB':'P100','Tesla_T4':'T4','Tesla_V100-PCIE-32GB':'V100','NVIDIA_A100-PCIE-40GB':'A100','AMD_Instinct_MI100':'MI100','AMD_Instinct_MI210':'MI210'}
EW=['add','mul','div','pow','addu','mulu','divu','powu','gelu','relu','tanh','ln','softmax']
def spec(g):
    s=json.load(open(f'{D}/device_configs/{g}.json'))
    return dict(bw=s['Mem_Bw']*1e9, sm=s['Num_Sm'], freq=s['Freq']*1e6, l2=s['L2Cache']*2**20,
                peak_mm=s.get('SingleFLOPs',s.get('SingleFLOPsMM'))*1e9,
                peak_vec=s.get('SingleFLOPs',s.get('SingleFLOPsVEC'))*1e9, cores=s['Core_Per_SM'])
def load(op,g):
    f=f'{D}/{op}/{g}.csv'
    if not os.path.exists(f): return None
    cols=['B','M','N','K','Latency'] if op in('linear','bmm') else ['B','H','Latency']
    d=pd.read_csv(f,usecols=cols).dropna()
    d['gpu']=g
    d['lat']=d['Latency']*1e-3  # seconds
    return d.reset_index(drop=True)
