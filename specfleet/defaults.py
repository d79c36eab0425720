"""Every specfleet tunable, with its default: the one place to read them (like Ansible's defaults/main.yml).

Package data, not a module to import: specfleet reads this file with importlib.resources (fleet/settings.py:
load_defaults / default_comments). `specfleet vars` prints it as a table, and docs/variables.md is made from
it (tests/unit/test_docs.py keeps the two in step). Each variable has exactly one trailing comment, on the last
line of its assignment (default_comments takes the text after the line's last `  # `, so a line too long for
ruff carries `# noqa: E501` before that comment).

Override them in your fleet project, lowest precedence first: these defaults < the project's
group_data/all.py < the deploy's profile < inventory vars (all < parent group < child group < host).
"""

# --- serving container -------------------------------------------------------------------------
image = "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6"  # noqa: E501  # container image that runs trtllm-serve (pulled only when missing on the host)
gpus = True  # pass --gpus=all and require the NVIDIA container runtime; false only on hosts without a GPU
container_env = {}  # noqa: E501  # extra non-secret environment for the serving container, e.g. {"TRT_LLM_DISABLE_LOAD_WEIGHTS_IN_PARALLEL": "1"}
serve_host = "127.0.0.1"  # noqa: E501  # address the server (trtllm-serve, vllm serve) binds; it has no authentication, so loopback unless you put a proxy in front
serve_port = 8000  # TCP port the server (trtllm-serve, vllm serve) listens on
extra_llm_api_options = {}  # noqa: E501  # TRT-LLM options deep-merged over the profile's extra-llm-api-config.yml; validated, on every host that sets them, for the image's TensorRT-LLM version
vllm_image = "nvcr.io/nvidia/vllm:26.05.post1-py3"  # noqa: E501  # container image that runs `vllm serve` for the vllm_* profiles (NVIDIA's single-Spark vLLM playbook image)
vllm_gpu_memory_utilization = 0.8  # noqa: E501  # the share of the memory vLLM takes for weights, activations and KV cache (--gpu-memory-utilization): NVIDIA's Spark recipes' 0.8; at start vLLM refuses a share above what is free (MemAvailable / total on a GB10), and the preflight one that would not leave memory_reserve_gb
vllm_options = {}  # noqa: E501  # vLLM engine arguments (snake_case, e.g. max_model_len, speculative_config) deep-merged over a vllm_* profile's; validated, on every host that sets them, against the EngineArgs and SpeculativeConfig of the vLLM that vllm_image carries; rendered as argv

# --- models --------------------------------------------------------------------------------------
target_revision = "main"  # branch, tag or commit of the target model; resolved once to a commit on the controller
draft_revision = "main"  # branch, tag or commit of the draft model / EAGLE-3 head; resolved like target_revision
hub_endpoint = "https://huggingface.co"  # noqa: E501  # Hugging Face Hub (or a Hub-compatible mirror) the hosts download from; a hub_mirror host's upstream; with a hub_mirror group the other hosts default to the mirror
controller_hub_endpoint = None  # Hub address the controller uses to resolve commits and sizes; None means hub_endpoint
hf_token_required = True  # refuse to deploy without a Hugging Face token (HF_TOKEN or hf_token_file) on the controller
hf_token_file = None  # controller path of a file holding the HF token; None reads the HF_TOKEN environment variable
fetch_workers = 8  # parallel file downloads per model on each host
hub_client_requirement = "huggingface_hub==2.4.0"  # pip requirement installed in the host's fetch virtualenv
pip_index_url = None  # PyPI mirror for the host's fetch virtualenv; None uses pip's default index

# --- Hub mirror (hosts of the inventory group `hub_mirror`; deploys/hub_mirror.py) --------------------
mirror_port = 8090  # noqa: E501  # TCP port of the fleet's Hub mirror (olah); the other hosts' hub_endpoint defaults to http://<mirror>:<port>
mirror_bind = "0.0.0.0"  # address the mirror's filtering socket binds on its host (an IP address)
mirror_engine_port = 18090  # loopback port olah itself listens on, behind the filtering socket (systemd-socket-proxyd)
mirror_allowed_networks = ["127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]  # noqa: E501  # networks (CIDR) that may reach the mirror: IPAddressDeny=any + IPAddressAllow= on its systemd socket, enforced by the kernel
mirror_address = None  # noqa: E501  # address the fleet hosts reach the mirror at; None: the mirror host's ansible_host/ssh_hostname, else its inventory name
mirror_cache_dir = "/var/lib/specfleet-mirror"  # mirror host directory for olah's cache, config, logs and virtualenv
mirror_requirement = "olah==0.5.4"  # noqa: E501  # pip requirement of the mirror engine, installed in its own virtualenv from pip_index_url
mirror_python = "python3"  # interpreter (Python >= 3.10) the mirror's virtualenv is made with
hub_fallback = False  # noqa: E501  # a host that downloads from the mirror goes to the mirror's upstream Hub directly (with a warning) when the mirror is down or failed to warm; false: it refuses to stage and keeps serving

# --- image registry (on the hub_mirror group's host, for the Sparks; deploys/hub_mirror.py) ---------
image_mirror = False  # noqa: E501  # the Sparks pull their pinned image from a registry on the hub_mirror host, which fetches each locked digest from upstream once; set it on the mirror host too (it runs the registry)
image_registry_port = 5000  # noqa: E501  # TCP port of the image registry on the mirror's fleet address (a filtering socket that admits only the fleet's Sparks)
image_registry_engine_port = 15000  # noqa: E501  # loopback port the read-only registry (the distribution's docker-registry) listens on, behind the filtering socket
image_store_dir = "/var/lib/specfleet-mirror/images"  # noqa: E501  # mirror host directory of the registry's storage (keep it on a volume of its own)
image_store_budget_gb = 100  # noqa: E501  # most disk (GB) the image store may hold; images the lock no longer pins are evicted first to stay within it
ngc_api_key_file = None  # noqa: E501  # controller path of an NGC API key file; the mirror's fetch logs in with it (nvcr.io's anonymous tokens expire); None pulls anonymously
ngc_registry = "nvcr.io"  # the registry the NGC API key logs in to (the key is sent to no other)
image_fallback = False  # noqa: E501  # a Spark whose image registry is down, failed to fetch, or fails its pull after the fetch pulls from the image's own registry (with a warning); false: it refuses to pull and keeps serving

# --- gateway (hosts of the inventory group `gateway`; deploys/gateway.py) ----------------------------
serves = None  # noqa: E501  # profile this Spark serves (eagle3, draft_target, baseline, ngram, qwen3_eagle3_pair, vllm_eagle3, vllm_draft_target, vllm_ngram, vllm_baseline); required on every Spark of a fleet with a gateway group; a profile deploy skips hosts that serve another
fleet_address = None  # noqa: E501  # IP address the other fleet hosts reach this host at (gateway -> Spark, the Sparks' allow-lists); None: its ssh_hostname
gateway_port = 8000  # TCP port of the fleet's OpenAI-compatible endpoint on each gateway host
gateway_bind = "0.0.0.0"  # address the gateway's endpoint binds on its host (an IP address)
gateway_metrics_port = 8404  # noqa: E501  # TCP port of the gateway's Prometheus metrics (/metrics) and its health path, served without an API key
gateway_health_path = "/healthz"  # noqa: E501  # path of the gateway's own health (200 while some model has a ready host), for DNS or a VIP
gateway_api_keys_file = None  # noqa: E501  # controller path of the clients' API keys (`name key` per line); on the gateway only their SHA-256 digests, root-only
gateway_tls_cert_file = None  # controller path of the TLS certificate chain (PEM); None serves plain HTTP
gateway_tls_key_file = None  # noqa: E501  # controller path of the TLS private key (PEM), uploaded root-only; set together with gateway_tls_cert_file
gateway_timeout_sec = 3600  # noqa: E501  # longest silence on a request or stream through the gateway (a long prefill, a whole non-streamed generation)
gateway_queue_timeout_sec = 600  # how long a request may wait in the gateway for a free Spark before a 503
gateway_check_inter_ms = 2000  # interval of each gateway's health and agent checks of each Spark
gateway_check_fall = 2  # failed health checks in a row that take a Spark out of the pool
gateway_check_rise = 2  # passed health checks in a row that put it back (its agent must also say up)
gateway_server_maxconn = 64  # requests one gateway sends one Spark at once; more wait in the gateway's queue
gateway_backend_port = 8001  # noqa: E501  # port on each Spark that only the gateways reach (a filtering socket relaying to serve_port)
gateway_agent_port = 8002  # noqa: E501  # port on each Spark of its readiness agent (up only while its release passed its gate; gateways only)
drain_timeout_sec = 600  # noqa: E501  # how long a drain waits for a Spark's in-flight requests (streams too) before it restarts the Spark anyway

# --- two Sparks as one server (the hosts of an inventory group pair_<name>; profile qwen3_eagle3_pair) --------
pair_role = None  # noqa: E501  # this host's role in its pair_* group: head (runs the MPI launch, the pair's endpoint) or worker
pair_link_interfaces = ["enp1s0f1np1", "enP2p1s0f1np1"]  # noqa: E501  # the ConnectX-7 logical interfaces of the pair's link (a Spark's names for one QSFP port)
pair_link_subnets = ["192.168.100.0/24", "192.168.101.0/24"]  # noqa: E501  # one IPv4 subnet per link interface, the same on both hosts (NVIDIA's connect-two-sparks guidance)
pair_link_addresses = None  # noqa: E501  # this host's address/prefix on each link interface; None: host 10 (head) or 11 (worker) of each subnet
pair_link_min_speed_mbps = 200000  # noqa: E501  # least link speed (Mb/s), checked where the driver reports one (virtio does not); 0: not checked (connect-two-sparks: 200000)
pair_link_confirm_sec = 60  # noqa: E501  # netplan try's timeout for a link change: reverted unless the controller comes back over SSH and confirms it within this
pair_ssh_port = 22  # noqa: E501  # the worker's sshd port on its link addresses, which the head's MPI launch connects to (pinned in the head's known_hosts)

# --- tiktoken encodings (gpt-oss / Harmony) ------------------------------------------------------
tiktoken_base_url = "https://openaipublic.blob.core.windows.net/encodings"  # noqa: E501  # where hosts fetch the tiktoken files (point at a mirror if needed)
tiktoken_sha256 = {
    "o200k_base.tiktoken": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    "cl100k_base.tiktoken": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}  # expected SHA-256 of each encoding file

# --- host layout and users -----------------------------------------------------------------------
data_dir = "/var/lib/specfleet"  # host directory for the model cache, encodings, releases and specfleet's host tools
secrets_dir = "/etc/specfleet"  # host directory (root-only, 0700) holding the HF token file
operator_users = []  # existing host users appended to the docker group (docker access is root-equivalent)
disk_headroom_gb = 20  # noqa: E501  # free disk (GB) that must remain after the models still to fetch (and the image still to pull) are downloaded
image_size_gb = 25  # noqa: E501  # disk (GB) the disk preflight counts for an image still to pull only when the lock records no size for it (an older lock, an image not pinned); otherwise it counts the lock's size for the host's platform
memory_reserve_gb = 8  # noqa: E501  # memory (GB) of MemTotal the weights and their overhead must leave (the OS, docker, sshd, what the KV cache leaves); the preflight refuses a profile that would not leave it, and testinfra checks a serving host keeps it available
earlyoom_available_gb = None  # noqa: E501  # MemAvailable (GB) below which earlyoom (the distribution's, installed by the deploy) ends the serving container first (SIGKILL): it sees a GB10's GPU allocations, which the container's cap does not; None: a quarter of memory_reserve_gb; 0 leaves earlyoom alone
memory_overhead_fraction = 0.15  # noqa: E501  # memory a server needs beyond its weights, as a fraction of them (CUDA context, runtime, CUDA graphs, activations, a minimal KV cache): an estimate, not an upstream figure

# --- systemd service -----------------------------------------------------------------------------
service_name = None  # noqa: E501  # the serving unit's and container's name (and the base of a Spark's gateway-facing units); None: the engine's own, specfleet-trtllm or specfleet-vllm, with the gateway-facing units named specfleet-trtllm-* on either engine (so that they stay up while a host switches engines)
restart_sec = 30  # systemd RestartSec: pause before restarting a crashed server
start_limit_burst = 3  # systemd StartLimitBurst: starts allowed within start_limit_interval_sec before giving up
start_limit_interval_sec = 3600  # noqa: E501  # systemd StartLimitIntervalSec: window for start_limit_burst (> burst x (restart_sec + load time))
stop_timeout_sec = 60  # seconds docker gives the server to stop before killing it

# --- readiness gate ------------------------------------------------------------------------------
health_timeout_sec = 1800  # seconds to wait for GET /health to answer 200 after a (re)start (model load takes minutes)
health_interval_sec = 1  # seconds between a gate's /health polls (a switch ends within this of the server being ready)
smoke_timeout_sec = 600  # seconds allowed for the smoke completion after /health is up

# --- releases, cleanup and rollback --------------------------------------------------------------
keep_releases = 5  # releases kept per host (the current one always kept); older ones and their unused models are pruned
rollback_to = None  # rollback deploy: release id to return to; None means the previous release
purge_models = False  # cleanup deploy: also delete the model cache, encodings and releases
