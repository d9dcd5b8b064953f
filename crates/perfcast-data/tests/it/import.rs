//! Importers on the committed samples of the published data (tests/data) and on bad inputs.

use std::path::{Path, PathBuf};

use perfcast_core::{Conv2d, DeviceKind, Linear, Matmul, ModuleKind, ModuleSpec, Phase};
use perfcast_data::import::{self, DeviceRows, Import};
use perfcast_data::{DatasetDir, Record, Timing};

fn data(source: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(source)
}

fn device<'a>(import: &'a Import, id: &str) -> &'a DeviceRows {
    import
        .devices
        .iter()
        .find(|d| d.id == id)
        .unwrap_or_else(|| panic!("no device `{id}`"))
}

fn rows(d: &DeviceRows, kind: ModuleKind) -> &[Record] {
    d.tables.get(&kind).map(Vec::as_slice).unwrap_or(&[])
}

fn skipped(d: &DeviceRows, kind: ModuleKind, reason: &str) -> usize {
    d.skipped
        .get(&kind)
        .and_then(|r| r.get(reason))
        .copied()
        .unwrap_or(0)
}

/// Copies a sample folder into a temp dir, so a test can spoil one file.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Replaces the first occurrence of `from` in line `line` (1-based) of `path`.
fn edit_line(path: &Path, line: usize, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    assert!(lines[line - 1].contains(from), "{}", lines[line - 1]);
    lines[line - 1] = lines[line - 1].replacen(from, to, 1);
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

#[test]
fn neusight_sample_maps_every_kind() {
    let import = import::neusight::import(&data("neusight")).unwrap();
    let ids: Vec<&str> = import.devices.iter().map(|d| d.id.as_str()).collect();
    assert_eq!(
        ids,
        ["Tesla_T4", "Tesla_V100-PCIE-32GB", "AMD_Instinct_MI100"]
    );
    let v100 = device(&import, "Tesla_V100-PCIE-32GB");
    assert_eq!(rows(v100, ModuleKind::Linear).len(), 20);
    assert_eq!(rows(v100, ModuleKind::Matmul).len(), 20);
    assert_eq!(rows(v100, ModuleKind::Conv2d).len(), 10);
    assert_eq!(
        rows(device(&import, "Tesla_T4"), ModuleKind::Linear).len(),
        5
    );
    assert!(v100.skipped.is_empty());

    // linear: B,M,N,K = 1,58,13,141.
    let r = &rows(v100, ModuleKind::Linear)[0];
    assert_eq!(
        r.spec,
        ModuleSpec::Linear(Linear {
            tokens: 58,
            in_features: 13,
            out_features: 141,
            bias: true
        })
    );
    assert_eq!(r.context.batch, 1);
    assert_eq!(r.context.phase, Phase::Inference);
    assert_eq!((r.context.threads, r.context.utilisation), (1, 0.0));
    assert_eq!(r.backend, "neusight:pytorch-2.1");
    assert_eq!(r.timing(), Some(&Timing::median_only(0.06595200051863988)));

    // bmm: (13, 27, 15) @ (13, 15, 29).
    let r = &rows(v100, ModuleKind::Matmul)[0];
    assert_eq!(
        r.spec,
        ModuleSpec::Matmul(Matmul {
            heads: 1,
            m: 27,
            k: 15,
            n: 29,
            trans_a: false,
            trans_b: false,
        })
    );
    assert_eq!(r.context.batch, 13);
    assert_eq!(r.timing().unwrap().median_ms, 0.04125866542259852);

    // conv: B 38, 893 -> 326 channels, 3x3 on 5x5, stride 1, padding 1.
    let r = &rows(v100, ModuleKind::Conv2d)[0];
    assert_eq!(
        r.spec,
        ModuleSpec::Conv2d(Conv2d {
            in_channels: 893,
            out_channels: 326,
            input_hw: [5, 5],
            kernel: [3, 3],
            stride: [1, 1],
            padding: [1, 1],
            dilation: [1, 1],
            groups: 1,
            bias: false,
        })
    );
    assert_eq!(r.context.batch, 38);
    assert_eq!(r.timing().unwrap().median_ms, 0.8809813261032104);

    // Element-wise, LayerNorm and softmax: a B x H tensor is [1, 1, H] at batch B.
    for kind in [
        ModuleKind::Add,
        ModuleKind::AddScalar,
        ModuleKind::LayerNorm,
        ModuleKind::Softmax,
    ] {
        assert_eq!(rows(v100, kind).len(), 5, "{kind}");
    }
    let r = &rows(v100, ModuleKind::Add)[0];
    let e = perfcast_core::Elementwise { shape: [1, 1, 168] };
    assert_eq!(r.spec, ModuleSpec::Add(e));
    assert_eq!(r.context.batch, 127);
    assert_eq!(r.timing().unwrap().median_ms, 0.032531199604272844);
    let r = &rows(v100, ModuleKind::LayerNorm)[0];
    let ln = perfcast_core::LayerNorm {
        tokens: 1,
        features: 272,
    };
    assert_eq!(r.spec, ModuleSpec::LayerNorm(ln));
    assert_eq!(r.context.batch, 60);
    // AMD rows come with their own spec (the vector fp32 peak).
    let mi100 = device(&import, "AMD_Instinct_MI100");
    assert_eq!(rows(mi100, ModuleKind::Add).len(), 3);
    assert_eq!(mi100.device.as_ref().unwrap().peak_gflops, 23100.0);

    let spec = v100.device.as_ref().unwrap();
    assert_eq!(spec.name, "Tesla V100-PCIE-32GB");
    assert_eq!(spec.kind, DeviceKind::Gpu);
    assert_eq!(
        (
            spec.peak_gflops,
            spec.mem_bandwidth_gbs,
            spec.cores,
            spec.threads
        ),
        (14029.0, 900.0, 80, 5120)
    );
    assert_eq!(
        (spec.clock_mhz, spec.memory_gb, spec.cache_mb),
        (1370.0, 32.0, 6.0)
    );
}

#[test]
fn neusight_records_each_gpus_launch_floor_from_its_adds() {
    // The smallest adds' 2% quantile (with 3-5 rows: the fastest), rounded to 0.1 us; a GPU
    // without `add/` rows gets none.
    let import = import::neusight::import(&data("neusight")).unwrap();
    let launch = |id: &str| device(&import, id).device.as_ref().unwrap().launch_us;
    assert_eq!(launch("Tesla_V100-PCIE-32GB"), Some(32.1));
    assert_eq!(launch("AMD_Instinct_MI100"), Some(16.1));
    assert_eq!(launch("Tesla_T4"), None);
}

#[test]
fn neusight_device_configs_load_as_a_table() {
    let specs = import::neusight::load_device_configs(&data("neusight")).unwrap();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    // The tensor-parallel H100 pair (`_TP.json`) is not one device and is left out.
    assert_eq!(
        names,
        [
            "AMD Instinct MI100",
            "NVIDIA H100 80GB HBM3",
            "Tesla T4",
            "Tesla V100-PCIE-32GB"
        ]
    );
    // AMD files give a vector and a matrix-core peak; the vector one is the fp32 peak.
    assert_eq!(specs[0].peak_gflops, 23100.0);
    assert_eq!(specs[1].peak_gflops, 66908.0);
    // The config folder itself works too.
    let again = import::neusight::load_device_configs(&data("neusight/device_configs")).unwrap();
    assert_eq!(again, specs);
}

#[test]
fn imports_write_datasets_that_read_back() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("neusight");
    let import = import::neusight::import(&data("neusight")).unwrap();
    let summary = import.write(&out, false).unwrap();
    assert_eq!(summary.imported, 78);
    assert_eq!(summary.skipped, 0);
    let v100 = DatasetDir::open(out.join("tesla-v100-pcie-32gb")).unwrap();
    assert_eq!(
        v100.kinds(),
        [
            ModuleKind::Conv2d,
            ModuleKind::Linear,
            ModuleKind::Matmul,
            ModuleKind::LayerNorm,
            ModuleKind::Add,
            ModuleKind::Softmax,
            ModuleKind::AddScalar
        ]
    );
    let source = device(&import, "Tesla_V100-PCIE-32GB");
    for kind in v100.kinds() {
        assert_eq!(v100.read(kind).unwrap(), rows(source, kind));
    }
    assert_eq!(&v100.device().unwrap(), source.device.as_ref().unwrap());
    assert!(out.join("tesla-t4/linear.parquet").is_file());
    assert!(out.join(import::IMPORT_FILE).is_file());

    // Refused without force; replaced with it; no temp folders left beside it.
    let err = import.write(&out, false).unwrap_err().to_string();
    assert!(err.contains("already exists"), "{err}");
    let justus = import::justus::import(&data("justus")).unwrap();
    justus.write(&out, true).unwrap();
    assert!(!out.join("tesla-v100-pcie-32gb").exists());
    assert!(out.join("tesla-k40/conv2d.parquet").is_file());
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(left.len(), 1, "temp folders left behind: {left:?}");
}

#[test]
fn justus_sample_maps_conv_and_dense() {
    let import = import::justus::import(&data("justus")).unwrap();
    assert_eq!(import.devices.len(), 6);
    assert_eq!(import.imported(), 24 + 18);
    let gtx = device(&import, "GTX1080Ti");
    assert_eq!(gtx.device.as_ref().unwrap().name, "GeForce GTX 1080 Ti");
    assert_eq!(rows(gtx, ModuleKind::Conv2d).len(), 4);
    assert_eq!(rows(gtx, ModuleKind::Linear).len(), 3);

    // batch 9, 100 -> 97 channels, 4x4 VALID on 71x71, stride 2, bias, forward + backward.
    let r = &rows(gtx, ModuleKind::Conv2d)[0];
    assert_eq!(
        r.spec,
        ModuleSpec::Conv2d(Conv2d {
            in_channels: 100,
            out_channels: 97,
            input_hw: [71, 71],
            kernel: [4, 4],
            stride: [2, 2],
            padding: [0, 0],
            dilation: [1, 1],
            groups: 1,
            bias: true,
        })
    );
    assert_eq!(r.context.batch, 9);
    assert_eq!(r.context.phase, Phase::Training);
    assert_eq!(r.backend, "justus:tensorflow-1");
    let t = r.timing().unwrap();
    assert_eq!(t.median_ms, 3.428921699523926);
    assert_eq!(t.min_ms, Some(3.3063220977783203));
    assert_eq!(
        (t.mad_ms, t.p10_ms, t.p90_ms, t.repetitions),
        (None, None, None, None)
    );

    // SAME, 5x5 on 394, stride 2: out 197, total (196 * 2 + 5 - 394) = 3, so 1 per side.
    let ModuleSpec::Conv2d(c) = &rows(gtx, ModuleKind::Conv2d)[1].spec else {
        panic!("not a conv")
    };
    assert_eq!(
        (c.input_hw, c.kernel, c.stride),
        ([394, 394], [5, 5], [2, 2])
    );
    assert_eq!(c.padding, [1, 1]);
    // forward_only True is inference.
    assert_eq!(
        rows(gtx, ModuleKind::Conv2d)[2].context.phase,
        Phase::Inference
    );

    // dense: batch 30, 3263 -> 3675.
    let r = &rows(gtx, ModuleKind::Linear)[0];
    assert_eq!(
        r.spec,
        ModuleSpec::Linear(Linear {
            tokens: 1,
            in_features: 3263,
            out_features: 3675,
            bias: true
        })
    );
    assert_eq!(r.context.batch, 30);
    assert_eq!(r.context.phase, Phase::Training);
    assert_eq!(r.timing().unwrap().min_ms, Some(2.251920700073242));

    let v100 = device(&import, "V100").device.as_ref().unwrap();
    assert_eq!((v100.peak_gflops, v100.mem_bandwidth_gbs), (14000.0, 900.0));
}

#[test]
fn justus_skips_impossible_shapes_and_unknown_devices() {
    let tmp = tempfile::tempdir().unwrap();
    let header = "batchsize,channels_in,channels_out,kernelsize,matsize,strides,use_bias,device,\
                  forward_only,padding_name,timeUsed_median,timeUsed_min,gpu_index,source_file\n";
    std::fs::write(
        tmp.path().join("conv.csv"),
        format!(
            "{header}\
             2,3,4,5,3,1,True,V100,True,VALID,1.5,1.4,0,a.pkl\n\
             2,3,4,3,5,1,True,V100,True,SAME,1.5,1.4,0,a.pkl\n\
             2,3,4,3,5,1,True,TPUv9,False,SAME,1.5,1.4,0,a.pkl\n"
        ),
    )
    .unwrap();
    let import = import::justus::import(tmp.path()).unwrap();
    let v100 = device(&import, "V100");
    assert_eq!(rows(v100, ModuleKind::Conv2d).len(), 1);
    assert_eq!(
        skipped(
            v100,
            ModuleKind::Conv2d,
            "impossible shape: kernel larger than the padded input"
        ),
        1
    );
    let tpu = device(&import, "TPUv9");
    assert!(tpu.device.is_none());
    assert_eq!(
        skipped(
            tpu,
            ModuleKind::Conv2d,
            "no published spec for device `TPUv9`"
        ),
        1
    );
    // Skipped devices get no dataset, but the summary lists them.
    let out = tmp.path().join("out");
    let summary = import.write(&out, false).unwrap();
    assert_eq!((summary.imported, summary.skipped), (1, 2));
    assert_eq!(summary.devices[1].dataset, None);
    assert!(out.join("tesla-v100-pcie-16gb/conv2d.parquet").is_file());
}

#[test]
fn deepbench_keeps_fp32_rows_only() {
    let import = import::deepbench::import(&data("deepbench")).unwrap();
    let v100 = device(&import, "NV_V100");
    assert_eq!(v100.device.as_ref().unwrap().name, "Tesla V100-SXM2-16GB");
    let conv = rows(v100, ModuleKind::Conv2d);
    // 11 fp32 training rows: 11 forward (inference) rows, and 8 training rows (3 lack
    // bwd_inputs_ms).
    let phases = |p: Phase| conv.iter().filter(|r| r.context.phase == p).count();
    assert_eq!((phases(Phase::Inference), phases(Phase::Training)), (11, 8));
    assert_eq!(
        skipped(
            v100,
            ModuleKind::Conv2d,
            "precision `16 bit inputs, 16 bit multiplication, 32 bit addition` is not fp32"
        ),
        3
    );
    assert_eq!(
        skipped(
            v100,
            ModuleKind::Conv2d,
            "training: `bwd_inputs_ms` not published (`N/A*`)"
        ),
        3
    );
    // W 341, H 79, C 32, N 4, K 32, S 10, R 5, no padding, stride 2; 0.307 + 0.861 + 0.295 ms.
    let expected = ModuleSpec::Conv2d(Conv2d {
        in_channels: 32,
        out_channels: 32,
        input_hw: [79, 341],
        kernel: [5, 10],
        stride: [2, 2],
        padding: [0, 0],
        dilation: [1, 1],
        groups: 1,
        bias: false,
    });
    let same: Vec<&Record> = conv
        .iter()
        .filter(|r| r.spec == expected && r.context.batch == 4)
        .collect();
    assert_eq!(same.len(), 2);
    let training = same
        .iter()
        .find(|r| r.context.phase == Phase::Training)
        .unwrap();
    assert!((training.timing().unwrap().median_ms - 1.463).abs() < 1e-12);
    let forward = same
        .iter()
        .find(|r| r.context.phase == Phase::Inference)
        .unwrap();
    assert_eq!(forward.timing(), Some(&Timing::median_only(0.307)));
    assert_eq!(forward.backend, "deepbench:NV_V100");
    assert_eq!(forward.context.threads, 1);

    // gemm: M 1760, N 16, K 1760 -> m 1760, k 1760, n 16, batch 1, one GEMM = a forward pass.
    let gemm = rows(v100, ModuleKind::Matmul);
    assert_eq!(gemm.len(), 10);
    let nn = ModuleSpec::Matmul(Matmul {
        heads: 1,
        m: 1760,
        k: 1760,
        n: 16,
        trans_a: false,
        trans_b: false,
    });
    assert_eq!(gemm[0].spec, nn);
    assert_eq!(gemm[0].context.batch, 1);
    assert_eq!(gemm[0].context.phase, Phase::Inference);
    assert_eq!(gemm[0].timing(), Some(&Timing::median_only(0.038)));
    // `A_T` T is `trans_a`, so the T,N row of the same shape is its own configuration
    // (and no row repeats another).
    let tn = ModuleSpec::Matmul(Matmul {
        heads: 1,
        m: 1760,
        k: 1760,
        n: 16,
        trans_a: true,
        trans_b: false,
    });
    let same: Vec<&Record> = gemm.iter().filter(|r| r.spec == tn).collect();
    assert_eq!(same.len(), 1);
    assert_eq!(same[0].timing(), Some(&Timing::median_only(0.037)));
    assert_eq!(gemm.iter().filter(|r| !r.spec.default_layout()).count(), 4);
    let tmp = tempfile::tempdir().unwrap();
    let summary = import.write(&tmp.path().join("out"), false).unwrap();
    let v100_summary = summary.devices.iter().find(|d| d.id == "NV_V100").unwrap();
    assert!(v100_summary.kinds.iter().all(|k| k.duplicates == 0));
    assert_eq!(
        skipped(
            v100,
            ModuleKind::Matmul,
            "precision `16 bit inputs, 16 bit multiplication, 32 bit addition` is not fp32"
        ),
        3
    );

    // int8 inference rows only: the T4 and the iPhone get no rows.
    let t4 = device(&import, "NV_T4");
    assert_eq!(t4.imported(), 0);
    assert_eq!(
        skipped(
            t4,
            ModuleKind::Conv2d,
            "precision `GEMM, Conv: Int8 multiplication, 32 bit accumulation` is not fp32"
        ),
        3
    );
    let iphone = device(&import, "iPhone_6");
    assert!(iphone.device.is_none() && iphone.imported() == 0);

    // The Xeon Phi is a CPU: its rows ran on all 272 hardware threads.
    let knl = device(&import, "IA_KNL7250");
    assert_eq!(knl.device.as_ref().unwrap().kind, DeviceKind::Cpu);
    assert_eq!(rows(knl, ModuleKind::Conv2d).len(), 4 + 2);
    assert_eq!(
        skipped(
            knl,
            ModuleKind::Conv2d,
            "training: `bwd_inputs_ms` not published"
        ),
        2
    );
    assert!(
        rows(knl, ModuleKind::Matmul)
            .iter()
            .all(|r| r.context.threads == 272)
    );
}

/// The library versions of the results file a device's fp32 rows come from become
/// its spec's `software`; without `specs.csv`, or when its files disagree, there is none.
#[test]
fn deepbench_software_stack_comes_from_specs_csv() {
    let software = |import: &Import, id: &str| {
        device(import, id)
            .device
            .as_ref()
            .and_then(|d| d.software.clone())
    };
    let import = import::deepbench::import(&data("deepbench")).unwrap();
    assert_eq!(
        software(&import, "NV_V100").as_deref(),
        Some("CUDA 10.1.243, cuDNN 7.6.2.24")
    );
    assert_eq!(
        software(&import, "IA_KNL7250").as_deref(),
        Some("MKL 2017.3, MKLML (2017.0.1)")
    );
    // Written into the dataset's device.json and read back.
    let tmp = tempfile::tempdir().unwrap();
    import.write(&tmp.path().join("out"), false).unwrap();
    let dir = DatasetDir::open(tmp.path().join("out/tesla-v100-sxm2-16gb")).unwrap();
    assert_eq!(
        dir.device().unwrap().software.as_deref(),
        Some("CUDA 10.1.243, cuDNN 7.6.2.24")
    );

    // No specs.csv: no stack, rows as before.
    let bare = tmp.path().join("bare");
    copy_dir(&data("deepbench"), &bare);
    std::fs::remove_file(bare.join("specs.csv")).unwrap();
    let without = import::deepbench::import(&bare).unwrap();
    assert_eq!(software(&without, "NV_V100"), None);
    assert_eq!(without.imported(), import.imported());

    // One V100 row from a results file with another CUDA: the device's stack is unknown.
    let mixed = tmp.path().join("mixed");
    copy_dir(&data("deepbench"), &mixed);
    edit_line(
        &mixed.join("gemm.csv"),
        7,
        "results/train/DeepBench_NV_V100.xlsx",
        "results/other.xlsx",
    );
    let specs = mixed.join("specs.csv");
    let text = std::fs::read_to_string(&specs).unwrap();
    std::fs::write(
        &specs,
        text + "results/other.xlsx,NV_V100,CUDA Version,9.0\n",
    )
    .unwrap();
    let mixed = import::deepbench::import(&mixed).unwrap();
    assert_eq!(software(&mixed, "NV_V100"), None);
}

#[test]
fn bad_cells_are_errors_naming_file_line_column_and_value() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        // (line 2 of linear/Tesla_V100-PCIE-32GB.csv: its Latency is 0.06595200051863988)
        ("0.06595200051863988", "NaN", "`NaN` is NaN", "Latency"),
        (
            "0.06595200051863988",
            "-0.5",
            "latency `-0.5` is negative",
            "Latency",
        ),
        (
            "0.06595200051863988",
            "fast",
            "`fast` is not a number",
            "Latency",
        ),
        (
            ",1,58,13,141",
            ",1,5x8,13,141",
            "`5x8` is not a number",
            "M",
        ),
    ];
    for (i, (from, to, message, column)) in cases.into_iter().enumerate() {
        let dir = tmp.path().join(format!("case{i}"));
        copy_dir(&data("neusight"), &dir);
        let file = dir.join("linear/Tesla_V100-PCIE-32GB.csv");
        edit_line(&file, 2, from, to);
        let err = import::neusight::import(&dir).unwrap_err().to_string();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("Tesla_V100-PCIE-32GB.csv"), "{err}");
        assert!(err.contains("line 2"), "{err}");
        assert!(err.contains(&format!("column `{column}`")), "{err}");
        assert!(err.contains(message), "{err}");
    }

    // A missing column names the file and the column.
    let dir = tmp.path().join("missing-column");
    copy_dir(&data("deepbench"), &dir);
    let gemm = dir.join("gemm.csv");
    let text = std::fs::read_to_string(&gemm)
        .unwrap()
        .replacen("time_ms", "time", 1);
    std::fs::write(&gemm, text).unwrap();
    let err = import::deepbench::import(&dir).unwrap_err().to_string();
    assert!(
        err.contains("gemm.csv") && err.contains("missing column `time_ms`"),
        "{err}"
    );

    // A transpose flag that is neither N nor T names the file, line, column and value.
    let dir = tmp.path().join("bad-transpose");
    copy_dir(&data("deepbench"), &dir);
    edit_line(
        &dir.join("gemm.csv"),
        4,
        ",1760,16,1760,N,N,",
        ",1760,16,1760,X,N,",
    );
    let err = import::deepbench::import(&dir).unwrap_err().to_string();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("gemm.csv")
            && err.contains("line 4")
            && err.contains("column `A_T`")
            && err.contains("`X` is neither `N` nor `T`"),
        "{err}"
    );

    // A missing folder or file names the path.
    let err = import::justus::import(&tmp.path().join("nowhere"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("nowhere"), "{err}");
    let dir = tmp.path().join("no-config");
    copy_dir(&data("neusight"), &dir);
    std::fs::remove_file(dir.join("device_configs/Tesla_T4.json")).unwrap();
    let err = import::neusight::import(&dir).unwrap_err().to_string();
    assert!(
        err.contains("Tesla_T4.csv") && err.contains("Tesla_T4.json"),
        "{err}"
    );
}

#[test]
fn a_failed_write_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let import = import::neusight::import(&data("neusight")).unwrap();
    // The parent of --out is a file: nothing can be created, and nothing is.
    std::fs::write(tmp.path().join("file"), "x").unwrap();
    assert!(import.write(&tmp.path().join("file/out"), false).is_err());
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(left.len(), 1);
}

const GPU: &str = "[device]\nname = \"Lab GPU\"\nkind = \"gpu\"\npeak_gflops = 1000.0\n\
    mem_bandwidth_gbs = 100.0\ncores = 10\nthreads = 640\nclock_mhz = 1000.0\nmemory_gb = 8.0\n\
    cache_mb = 4.0\nsource = \"published\"\n";

fn write_mapping(dir: &Path, body: &str) -> PathBuf {
    let path = dir.join("map.toml");
    std::fs::write(&path, format!("{body}\n{GPU}")).unwrap();
    path
}

const LINEAR_MAP: &str = "kind = \"linear\"\nbackend = \"lab-torch\"\nunit = \"us\"\n\
    [columns]\nbatch = \"bs\"\nin_features = \"fin\"\nout_features = \"fout\"\n\
    median_ms = \"lat_us\"\nphase = \"pass\"\n[defaults]\ntokens = 1\nbias = true\n";

#[test]
fn user_csv_maps_columns_units_and_phase() {
    let tmp = tempfile::tempdir().unwrap();
    let csv = tmp.path().join("lab.csv");
    std::fs::write(
        &csv,
        "bs,fin,fout,lat_us,pass,host\n8,512,1024,250,inference,node-3\n16,512,1024,1250.5,training,node-3\n",
    )
    .unwrap();
    let map = import::csv::Mapping::from_file(&write_mapping(tmp.path(), LINEAR_MAP)).unwrap();
    let import = import::csv::import(&csv, &map).unwrap();
    assert_eq!(import.imported(), 2);
    let d = &import.devices[0];
    let r = &rows(d, ModuleKind::Linear)[1];
    assert_eq!(
        r.spec,
        ModuleSpec::Linear(Linear {
            tokens: 1,
            in_features: 512,
            out_features: 1024,
            bias: true
        })
    );
    assert_eq!(r.context.batch, 16);
    assert_eq!(r.context.phase, Phase::Training);
    assert!((r.timing().unwrap().median_ms - 1.2505).abs() < 1e-12);
    assert_eq!(r.backend, "lab-torch");

    // A new dataset, then another kind into it, then the same kind only with force.
    let out = tmp.path().join("ds");
    import::csv::write(&import, &out, false).unwrap();
    let dir = DatasetDir::open(&out).unwrap();
    assert_eq!(
        dir.read(ModuleKind::Linear).unwrap(),
        rows(d, ModuleKind::Linear)
    );
    assert_eq!(dir.device().unwrap().name, "Lab GPU");

    let mm_csv = tmp.path().join("mm.csv");
    // The operand layout may come from a column (`trans_a`) or a default (`trans_b`).
    std::fs::write(&mm_csv, "m,k,n,ta,t\n64,64,64,true,0.5\n64,64,64,0,0.7\n").unwrap();
    let mm_map = tmp.path().join("mm.toml");
    std::fs::write(
        &mm_map,
        "kind = \"bmm\"\nbackend = \"lab-torch\"\nunit = \"ms\"\nphase = \"inference\"\n\
         device = \"ds/device.json\"\n[columns]\nm = \"m\"\nk = \"k\"\nn = \"n\"\nmedian_ms = \"t\"\n\
         trans_a = \"ta\"\n[defaults]\nheads = 4\nbatch = 2\ntrans_b = true\n",
    )
    .unwrap();
    let mm = import::csv::Mapping::from_file(&mm_map).unwrap();
    let mm_rows = import::csv::import(&mm_csv, &mm).unwrap();
    import::csv::write(&mm_rows, &out, false).unwrap();
    assert_eq!(dir.kinds(), [ModuleKind::Linear, ModuleKind::Matmul]);
    let err = import::csv::write(&mm_rows, &out, false)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("matmul.parquet") && err.contains("force"),
        "{err}"
    );
    import::csv::write(&mm_rows, &out, true).unwrap();
    let layouts: Vec<Vec<i64>> = dir
        .read(ModuleKind::Matmul)
        .unwrap()
        .iter()
        .map(|r| r.spec.layout())
        .collect();
    assert_eq!(layouts, [vec![1, 1], vec![0, 1]]);
}

#[test]
fn user_csv_bad_cells_and_mappings_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let map = import::csv::Mapping::from_file(&write_mapping(tmp.path(), LINEAR_MAP)).unwrap();
    let header = "bs,fin,fout,lat_us,pass\n";
    let cases = [
        (
            "8,512,1024,NaN,inference\n",
            "column `lat_us`: `NaN` is NaN",
        ),
        (
            "8,512,1024,-3,inference\n",
            "column `lat_us`: latency `-3` is negative",
        ),
        (
            "8,five,1024,3,inference\n",
            "column `fin`: `five` is not a number",
        ),
        (
            "8,512,1024,3,sideways\n",
            "column `pass`: `sideways` is neither",
        ),
        ("0,512,1024,3,inference\n", "`batch` must be at least 1"),
        ("8,0,1024,3,inference\n", "`in_features` must be at least 1"),
    ];
    for (row, message) in cases {
        let csv = tmp.path().join("bad.csv");
        std::fs::write(&csv, format!("{header}8,512,1024,3,inference\n{row}")).unwrap();
        let err = import::csv::import(&csv, &map).unwrap_err().to_string();
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains("bad.csv") && err.contains("line 3"), "{err}");
        assert!(err.contains(message), "{err}");
    }
    // A mapped column the CSV lacks.
    let csv = tmp.path().join("short.csv");
    std::fs::write(&csv, "bs,fin,fout,pass\n8,512,1024,inference\n").unwrap();
    let err = import::csv::import(&csv, &map).unwrap_err().to_string();
    assert!(
        err.contains("short.csv")
            && err.contains("missing column `lat_us`")
            && err.contains("median_ms"),
        "{err}"
    );
    // Unknown keys and missing settings in the mapping name the mapping file.
    let path = write_mapping(tmp.path(), &format!("{LINEAR_MAP}colour = 3\n"));
    let err = import::csv::Mapping::from_file(&path)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("map.toml") && err.contains("defaults.colour"),
        "{err}"
    );
    let path = write_mapping(tmp.path(), &LINEAR_MAP.replace("unit = \"us\"\n", ""));
    let err = import::csv::Mapping::from_file(&path)
        .unwrap_err()
        .to_string();
    assert!(err.contains("map.toml") && err.contains("unit"), "{err}");
    let path = write_mapping(tmp.path(), &LINEAR_MAP.replace("tokens = 1\n", ""));
    let err = import::csv::Mapping::from_file(&path)
        .unwrap_err()
        .to_string();
    assert!(err.contains("`tokens`"), "{err}");
}
