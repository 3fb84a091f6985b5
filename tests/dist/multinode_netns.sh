#!/usr/bin/env bash
# Multi-node for real on one machine: two network namespaces joined by a veth pair stand for two
# hosts (their addresses exist only inside those namespaces; nothing leaves this machine). `hp
# launch --hosts` starts one rank on each over TCP (mpirun runs in the first namespace and reaches
# the second through an rsh agent that enters it); the 10-step losses must equal the same 2-rank
# run over shared memory. Exits 77 (ctest: skipped, with the reason printed) where namespaces
# cannot be created (not root, no CAP_SYS_ADMIN, no iproute2).
# Usage: multinode_netns.sh HP_BINARY REPO_ROOT
source "$(dirname "$0")/../script_lib.sh" "$@"
ns1="hp$$a" ns2="hp$$b"
cleanup() { ip netns del "$ns1" 2>/dev/null; ip netns del "$ns2" 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
if ! command -v ip > /dev/null || ! ip netns add "$ns1" 2> "$dir/netns.err"; then
  echo "SKIPPED: cannot create network namespaces ($(cat "$dir/netns.err" 2>/dev/null))"
  exit 77
fi
ip netns add "$ns2"
ip link add "${ns1}v" type veth peer name "${ns2}v"
ip link set "${ns1}v" netns "$ns1"
ip link set "${ns2}v" netns "$ns2"
# 10.231.0.0/24 exists only inside the two namespaces.
for i in 1 2; do
  ns=$([ $i = 1 ] && echo "$ns1" || echo "$ns2")
  ip netns exec "$ns" ip link set "${ns}v" name hpveth
  ip netns exec "$ns" ip addr add "10.231.0.$i/24" dev hpveth
  ip netns exec "$ns" ip link set hpveth up
  ip netns exec "$ns" ip link set lo up
done
# mpirun's remote-start agent: "agent [options] HOST COMMAND": COMMAND inside HOST's namespace.
cat > "$dir/agent.sh" <<AGENT
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
case "\$host" in 10.231.0.1) ns=$ns1 ;; 10.231.0.2) ns=$ns2 ;; *) exit 1 ;; esac
exec ip netns exec "\$ns" /bin/sh -c "\$*"
AGENT
chmod +x "$dir/agent.sh"
cat > "$dir/run.yaml" <<YAML
model: {arch: qwen3, hidden: 32, layers: 2, heads: 4, kv_heads: 2, intermediate: 64, vocab: 259}
data: {path: $dir/corpus.txt}
optimizer: {name: adamw, lr: 0.01}
training: {steps: 10, batch_size: 12, seq_len: 32, seed: 3, mixed_precision: f32}
metrics: {log_every: 1, progress: lines}
checkpoint: {interval: 0, save_final: false}
YAML
"$hp" launch -n 2 -- "$hp" train "$dir/run.yaml" --set run.dir="$dir/shm" > "$dir/shm.log"
OMPI_MCA_plm_rsh_agent="$dir/agent.sh" OMPI_MCA_btl_tcp_if_include=hpveth \
  OMPI_MCA_oob_tcp_if_include=hpveth timeout 120 ip netns exec "$ns1" \
  "$hp" launch -n 2 --hosts 10.231.0.1:1,10.231.0.2:1 -- \
  "$hp" train "$dir/run.yaml" --set run.dir="$dir/tcp" > "$dir/tcp.log" 2>&1 ||
  { cat "$dir/tcp.log"; exit 1; }
grep -q "2 rank(s)" "$dir/tcp.log"
# The ranks really talked over the veth: FSDP's gathers and reductions crossed it.
rx=$(ip netns exec "$ns2" cat /sys/class/net/hpveth/statistics/rx_bytes)
echo "bytes received over the veth by the second host: $rx"
test "$rx" -gt 1000000
test "$(losses "$dir/tcp" | wc -l)" -eq 10
if ! cmp <(losses "$dir/shm") <(losses "$dir/tcp"); then
  paste <(losses "$dir/shm") <(losses "$dir/tcp"); exit 1
fi
echo "2 ranks in two network namespaces over TCP: 10 losses equal the shared-memory run's"
