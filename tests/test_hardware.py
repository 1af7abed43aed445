import pytest

from perfgate.launch import hardware
from perfgate.launch.hardware import Hardware


@pytest.mark.parametrize(
    "name, expected",
    [
        ("NVIDIA A100-SXM4-40GB", "nvidia-a100-sxm4-40gb"),
        ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
        ("Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "intel-xeon-platinum-8375c"),
        ("AMD EPYC 7B13 64-Core Processor", "amd-epyc-7b13-64-core"),
        ("???", "unknown"),
    ],
)
def test_slug(name, expected):
    assert hardware.slug(name) == expected


def test_gpu_class_is_model_x_gpus_per_node_x_nodes():
    hw = Hardware(cpu_model="AMD EPYC", cpu_cores=64, gpu_model="NVIDIA A100-SXM4-40GB", gpu_count=4)
    assert hardware.hardware_class(hw, kind="gpu", per_node=4, nodes=8) == "nvidia-a100-sxm4-40gb-x4-n8"


def test_cpu_class_is_model_cores_and_nodes():
    hw = Hardware(cpu_model="AMD EPYC", cpu_cores=2)
    assert hardware.hardware_class(hw, kind="cpu", per_node=2, nodes=1) == "cpu-amd-epyc-2c-n1"
    assert hardware.hardware_class(hw, kind="cpu", per_node=2, nodes=2) == "cpu-amd-epyc-2c-n2"


def test_a_cpu_name_without_a_model_number_gets_family_and_model():
    generation = "family 26 model 2 avx2 avx512f avx512_bf16"
    vm = Hardware(cpu_model="AMD EPYC", cpu_cores=2, cpu_generation=generation)
    assert hardware.hardware_class(vm, kind="cpu", per_node=2, nodes=1) == "cpu-amd-epyc-f26m2-avx512bf16-2c-n1"
    named = Hardware(cpu_model="AMD EPYC 9B45 Processor", cpu_cores=2, cpu_generation=generation)
    assert hardware.hardware_class(named, kind="cpu", per_node=2, nodes=1) == "cpu-amd-epyc-9b45-avx512bf16-2c-n1"


@pytest.mark.parametrize("flags, tier", [
    ("avx2", "avx2"), ("avx2 avx512f", "avx512"), ("avx2 avx512f avx512_bf16", "avx512bf16"),
    ("avx2 avx512f avx512_bf16 amx_bf16", "amx"), ("", "sse")])
def test_one_processor_with_other_vector_extensions_is_another_class(flags, tier):
    """A VM class's hosts differ in the kernels torch and oneDNN pick (issue 71): a baseline of one never judges
    another, and the name perfgate used before the tier is still found (a user's folder from then)."""
    vm = Hardware(cpu_model="AMD EPYC", cpu_cores=2, cpu_generation=f"family 25 model 17 {flags}".strip())
    name = hardware.hardware_class(vm, kind="cpu", per_node=2, nodes=1)
    assert name == f"cpu-amd-epyc-f25m17-{tier}-2c-n1"
    assert hardware.without_vector_tier(name) == "cpu-amd-epyc-f25m17-2c-n1"


def test_a_host_whose_vector_extensions_were_not_read_has_no_tier():
    """Another architecture (an aarch64 /proc/cpuinfo has no x86 family) or no /proc/cpuinfo at all."""
    assert hardware.vector_tier("") == ""
    assert hardware.without_vector_tier("nvidia-h200-x1-n1") == "nvidia-h200-x1-n1"


def test_cpu_flavour_on_a_gpu_host_is_classed_by_its_cpu():
    hw = Hardware(cpu_model="AMD EPYC", cpu_cores=16, gpu_model="NVIDIA H200", gpu_count=1)
    assert hardware.hardware_class(hw, kind="cpu", per_node=2, nodes=1) == "cpu-amd-epyc-16c-n1"


def test_detect_on_this_machine_matches_torch():
    torch = pytest.importorskip("torch")
    hw = hardware.detect()
    assert hw.cpu_cores >= 1 and hw.cpu_model
    assert hw.gpu_count == (torch.cuda.device_count() if torch.cuda.is_available() else 0)


def test_provenance_records_versions_hardware_commit_and_command(tmp_path):
    hw = Hardware(cpu_model="AMD EPYC", cpu_cores=2)
    prov = hardware.provenance(hw, root=tmp_path, command="python -m torch.distributed.run x.py",
                               hardware_class_name="cpu-amd-epyc-2c-n1")
    assert prov["git_commit"] == "unknown"
    assert prov["versions"]["torch"]
    assert prov["hardware"]["class"] == "cpu-amd-epyc-2c-n1"
    assert prov["command"] == "python -m torch.distributed.run x.py"
    assert prov["date"].endswith("+00:00")


def test_xdist_workers_get_disjoint_gpu_shares():
    ids = [str(i) for i in range(8)]
    shares = [hardware.gpus_for_worker(ids, worker, 3) for worker in range(3)]
    assert shares == [["0", "1"], ["2", "3"], ["4", "5"]]
    assert hardware.gpus_for_worker(["0", "1"], 2, 3) == []
    assert hardware.gpus_for_worker(ids, 0, 1) == ids


def test_cpu_generation_names_family_model_and_vector_extensions():
    cpuinfo = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\n"
               "flags\t\t: fpu sse2 avx2 avx512f avx512_bf16 sha_ni\n\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert hardware.cpu_generation(cpuinfo) == "family 26 model 2 avx2 avx512f avx512_bf16"
    assert hardware.cpu_generation("") == ""


def h100(host, gpus=4):
    return Hardware("AMD EPYC 9654", 96, "NVIDIA H100 80GB HBM3", gpus, host=host)


def test_the_nodes_of_a_launch_share_a_class_with_the_fewest_gpus_any_node_has():
    nodes = [h100("n1"), h100("n2", gpus=2)]
    assert hardware.common(nodes, "gpu") == h100("n1", gpus=2)
    assert Hardware.from_json({**nodes[1].to_json(), "unknown": 1}) == nodes[1]


def test_mixed_gpu_models_or_processors_are_an_error_that_names_the_nodes():
    a100 = Hardware("AMD EPYC 7763", 128, "NVIDIA A100-SXM4-40GB", 4, host="n2")
    with pytest.raises(hardware.MixedNodesError, match=r"different GPU models \(n1: NVIDIA H100 80GB HBM3, "
                                                       r"n2: NVIDIA A100-SXM4-40GB\).*--constraint"):
        hardware.common([h100("n1"), a100], "gpu")
    with pytest.raises(hardware.MixedNodesError, match=r"different processors \(n1: amd-epyc-9654, n2: amd-epyc-7763\)"):
        hardware.common([h100("n1"), a100], "cpu")


def test_nodes_of_one_processor_with_other_vector_extensions_are_mixed():
    """Two hosts of one VM class, one with avx512_bf16: their CPU flavour has no one class."""
    old, new = (Hardware("AMD EPYC", 2, cpu_generation=f"family 25 model 17 {flags}", host=host)
                for flags, host in (("avx2", "a"), ("avx2 avx512f avx512_bf16", "b")))
    with pytest.raises(hardware.MixedNodesError, match=r"a: amd-epyc-f25m17-avx2, b: amd-epyc-f25m17-avx512bf16"):
        hardware.common([old, new], "cpu")
