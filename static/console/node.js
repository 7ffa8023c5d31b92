// The node page: fetched from /console/api/nodes/<name> every ~10 s (or on a
// pushed "node changed") and redrawn in place; an hour of history from
// Prometheus, refreshed every minute.
(function () {
  "use strict";
  const { el, fmt, meter, known, when } = LG;
  const root = document.getElementById("node");
  const name = root.dataset.name;
  const q = (s) => `"${s.replace(/\\/g, "\\\\").replace(/"/g, '\\"')}"`;
  const sel = `node=${q(name)}`;
  const $ = (id) => document.getElementById(id);
  const set = (id, v) => { const n = $(id); n.replaceChildren(...[].concat(v)); };

  function rows(tbody, list, cells, empty, width) {
    tbody.replaceChildren(...(list.length ? list.map(cells) : [el("tr", {}, el("td", { colspan: width }, empty))]));
  }

  function now(d) {
    const fresh = d.measurements_fresh;
    $("state").textContent = fmt.dash(d.state);
    $("state").className = `state ${d.state || ""}`;
    set("tags", [d.simulated ? el("span", { class: "tag" }, "simulated") : "",
      d.cordoned ? el("span", { class: "tag warn" }, "cordoned") : ""]);
    set("heartbeat", d.last_heartbeat_at ? [when(d.last_heartbeat_at, "last heartbeat "), ` · every ${fmt.dash(d.heartbeat_interval_s)} s`] : "no heartbeat yet");
    set("cpu", fresh ? meter(d.cpu_utilization_percent) : LG.DASH);
    set("cpus", `${fmt.dash(d.cpus)} CPUs · ${fmt.dash(d.cpu_model)}`);
    const total = d.memory_total_bytes, avail = d.memory_available_bytes;
    const used = known(total) && known(avail) && total ? (100 * (total - avail)) / total : null;
    set("ram", fresh ? meter(used, "ram") : LG.DASH);
    set("ram-detail", `${fresh ? fmt.gib(d.memory_used_bytes) : LG.DASH} used of ${fmt.gib(total)}`);
    set("load", fresh ? `${fmt.num(d.load1, 2)} / ${fmt.num(d.load5, 2)} / ${fmt.num(d.load15, 2)}` : LG.DASH);
    set("measured", d.measured_at ? when(d.measured_at, "measured ") : "never measured");
    const dl = d.disk_local, ds = d.disk_shared;
    set("disk", dl ? `${fmt.gib(dl.free_bytes)} / ${fmt.gib(dl.total_bytes)}` : LG.DASH);
    set("disk-shared", ds ? `shared ${fmt.gib(ds.free_bytes)} / ${fmt.gib(ds.total_bytes)}` : "no shared filesystem");
    const notes = [...(d.warnings || []), ...(d.notices || [])];
    $("warnings").replaceChildren(...notes.map((w) => el("li", { class: "warn" }, w)));
  }

  function engines(d) {
    const list = d.engines || [];
    const empty = d.engines_probed === false || d.engines_probed === null ? "the agent has not looked yet" : "no engine installed";
    rows($("engines").tBodies[0], list, (e) => el("tr", {}, [
      el("td", {}, fmt.dash(e.name)), el("td", {}, fmt.dash(e.version)),
      el("td", { class: e.status === "installed" ? "ok" : e.status === "failed" ? "bad" : "" }, fmt.dash(e.status)),
      use(e, e.cpu_cores, (v) => `${fmt.num(v, 2)} cores`), use(e, e.memory_bytes, fmt.bytes),
      el("td", { class: "dim" }, fmt.dash(e.message)),
    ]), empty, 6);
  }

  // An engine's use summed over its shards here: none running is not zero
  // use, and a shard the agent did not measure makes the sum unknown.
  function use(e, v, show) {
    if (!e.shards) return el("td", { class: "dim" }, "no shard");
    return known(v) ? el("td", {}, show(v)) : el("td", { class: "dim unknown" }, "unknown");
  }

  const used = (v, show) => (known(v) ? show(v) : el("span", { class: "dim unknown" }, "unknown"));
  const reserved = (v, show) => (known(v) ? show(v) : "none");
  function replicas(d) {
    const list = d.replicas || [];
    const n = new Set(list.map((r) => r.replica)).size;
    $("replica-count").textContent = n ? `${n} replica${n > 1 ? "s" : ""}` : "";
    const cores = (v) => fmt.num(v, v < 10 ? 2 : 1);
    rows($("replicas").tBodies[0], list, (r) => el("tr", { "data-replica": r.replica, "data-shard": r.shard }, [
      el("td", {}, el("a", { href: `/held#${encodeURIComponent(r.model)}` }, r.model)),
      el("td", {}, [r.profile, el("br"), el("small", { class: "dim" }, `${r.engine}${r.engine_version ? ` ${r.engine_version}` : ""}`)]),
      el("td", { class: "gpus" }, r.gpus.length ? r.gpus.join(", ") : "none"),
      el("td", { class: "cores" }, [used(r.cpu_cores, cores), " / ", reserved(r.reserved_cores, (v) => String(v))]),
      el("td", { class: "memory" }, [used(r.memory_bytes, fmt.bytes), " / ", reserved(r.reserved_memory_bytes, fmt.bytes)]),
      el("td", { class: `shard-state ${r.state === "ready" ? "ok" : r.state === "failed" || r.state === "lost" ? "bad" : ""}` }, [
        r.state, r.replica_state !== r.state ? el("small", { class: "dim" }, ` (replica ${r.replica_state})`) : "",
        r.restarts ? el("small", { class: "warn" }, ` · ${r.restarts} restart(s)`) : "",
        r.message ? el("div", { class: "dim message" }, r.message) : ""]),
      el("td", {}, when(r.created_at)),
      el("td", { class: "route" }, r.route.startsWith("http") ? el("code", {}, r.route) : r.route),
    ]), "No replica runs here.", 8);
  }

  function gpuCard(g) {
    const s = g.sample || {};
    const memPct = known(s.memory_used_bytes) && g.memory_total_bytes ? (100 * s.memory_used_bytes) / g.memory_total_bytes : null;
    // The server's words (gpu_health.wear): the GPU map shows the same.
    const wear = g.wear.why;
    const card = el("div", { class: `gpu-card ${g.healthy ? "" : "unhealthy"}`, "data-gpu": g.index }, [
      el("h4", {}, [`GPU ${g.index} `, el("small", {}, `${fmt.dash(g.gpu_class)} · ${fmt.dash(g.pci_bus_id)}`)]),
      el("div", { class: "kv" }, [el("span", {}, "util"), meter(s.utilization_percent)]),
      el("div", { class: "kv" }, [el("span", {}, "memory"), meter(memPct, "ram")]),
      el("div", { class: "kv" }, [el("span", {}, "temp"), `${fmt.num(s.temperature_c, 0)} °C`]),
      el("div", { class: "kv" }, [el("span", {}, "power"), `${fmt.num(s.power_draw_w, 0)} / ${fmt.num(s.power_limit_w, 0)} W`]),
      g.healthy ? "" : el("p", { class: "bad" }, g.unhealthy_reason),
      wear.length ? el("p", { class: "warn" }, wear.join(" · ")) : "",
      el("div", { class: "gpu-charts" }),
    ]);
    return card;
  }

  let gpuKey = "";
  const gpuCharts = [];
  function gpus(d) {
    const box = $("gpus");
    if (!d.gpus.length) { box.replaceChildren(el("p", { class: "dim" }, "No GPU.")); return; }
    const key = d.gpus.map((g) => g.uuid).join();
    const cards = d.gpus.map(gpuCard);
    // Keep each card's history charts across refreshes: only their numbers move.
    if (key === gpuKey) {
      [...box.children].forEach((old, i) => {
        const charts = old.querySelector(".gpu-charts");
        cards[i].querySelector(".gpu-charts").replaceWith(charts);
      });
      box.replaceChildren(...cards);
      return;
    }
    gpuKey = key;
    box.replaceChildren(...cards);
    gpuCharts.length = 0;
    // Without Prometheus the section's note says so once, not twice per card.
    for (const g of d.prometheus ? d.gpus : []) {
      const c = box.querySelector(`[data-gpu="${g.index}"] .gpu-charts`);
      const gs = `${sel},gpu="${g.index}"`;
      gpuCharts.push({ box: null, title: "utilisation %", query: `llmgw_gpu_utilization_percent{${gs}}`, max: 100, unit: pct, axis: "% busy", container: c, legend: false, label: () => `GPU ${g.index}` });
      gpuCharts.push({ title: "memory used", query: `llmgw_gpu_memory_used_bytes{${gs}}`, unit: fmt.bytes, axis: "bytes", container: c, legend: false, label: () => `GPU ${g.index}` });
    }
    drawGpuCharts();
  }
  const drawGpuCharts = () => gpuCharts.forEach((s) => Charts.draw(s.container, s));

  function nvlink(d) {
    const t = d.gpu_topology;
    if (!t || !t.matrix) { set("nvlink", el("p", { class: "dim" }, d.gpus.length ? "The agent has not sent its NVLink matrix." : "No GPU.")); return; }
    const by = Object.fromEntries(d.gpus.map((g) => [g.uuid, g]));
    const head = el("tr", {}, [el("th", {}, ""), ...t.matrix.map((_, i) => el("th", {}, `GPU${i}`)), el("th", {}, "NUMA"), el("th", {}, "Nearest adapter")]);
    const body = t.matrix.map((row, i) => {
      const g = by[(t.gpus || [])[i]] || d.gpus[i] || {};
      return el("tr", {}, [el("th", {}, `GPU${i}`),
        ...row.map((c) => el("td", { class: `link ${/^NV/.test(c) ? "nv" : c === "X" ? "self" : "pcie"}` }, c)),
        el("td", {}, fmt.dash(g.numa_node)),
        el("td", {}, g.nearest_adapter ? `${g.nearest_adapter} (${fmt.dash(g.nearest_adapter_level)})` : LG.DASH)]);
    });
    set("nvlink", el("table", { class: "grid matrix" }, [el("thead", {}, head), el("tbody", {}, body)]));
  }

  function domain(d) {
    const domains = [...new Set(d.gpus.map((g) => g.domain).filter(Boolean))];
    const problems = d.gpus.filter((g) => g.nvlink_problem).map((g) => `GPU ${g.index}: ${g.nvlink_problem}`);
    const im = d.imex;
    const parts = [
      el("p", {}, domains.length ? ["Domain ", el("code", {}, domains.join(", ")), " — ", el("a", { href: "/admin/nvlink" }, "see the rack")] : "No multi-node NVLink domain."),
      el("p", {}, im ? ["IMEX ", el("b", { class: im.up ? "ok" : "bad" }, im.up ? "up" : "down"),
        ` · domain ${fmt.dash(im.domain_state)} · ${fmt.dash(im.channels)} channel(s) · ${(im.nodes || []).length} peer(s)`] : "IMEX: -"),
      ...problems.map((p) => el("p", { class: "bad" }, p)),
    ];
    set("domain", parts);
  }

  function ports(d) {
    rows($("ports").tBodies[0], d.ports, (p) => {
      const up = String(p.state || "").startsWith("ACTIVE") && p.phys_state === "LinkUp";
      const errs = Object.entries(p.errors || {});
      return el("tr", { "data-port": `${p.device}/${p.port}` }, [
        el("td", {}, `${p.device}/${p.port}`), el("td", {}, fmt.dash(p.link_layer)),
        el("td", { class: up ? "ok" : "bad" }, `${fmt.dash(p.state)} / ${fmt.dash(p.phys_state)}`),
        el("td", {}, p.rate_text || (known(p.rate_gbps) ? `${p.rate_gbps} Gb/s` : LG.DASH)),
        el("td", {}, fmt.dash(p.fabric)), el("td", {}, fmt.dash(p.physical_fabric)),
        el("td", { class: errs.length ? "bad" : "dim" }, errs.length ? errs.map(([k, v]) => `${k} ${v}`).join(", ") : "none"),
      ]);
    }, d.ports_at ? "No RDMA port." : "The agent has not reported ports.", 7);
  }

  function sensors(d) {
    const s = d.sensors;
    if (!s || !Object.keys(s).length) { set("sensors", el("p", { class: "dim" }, "No sensor reported.")); return; }
    const items = [];
    for (const p of s.cpu_packages || []) {
      items.push(el("div", { class: "kv" }, [el("span", {}, `CPU package ${p.package}`), `${fmt.num(p.temperature_c, 0)} °C · ${fmt.num(p.power_w, 0)} W`]));
    }
    if ("inlet_temperature_c" in s) items.push(el("div", { class: "kv" }, [el("span", {}, "Inlet"), `${fmt.num(s.inlet_temperature_c, 0)} °C`]));
    set("sensors", items);
  }

  // Each chart says its unit on its axis: cores as cores (d3's "~s" read
  // 0.008 cores as "8m"), bytes in binary units, load and queues as counts.
  const cores = (v) => d3.format("~g")(Number(v.toPrecision(3)));
  const count = d3.format("~g");
  const pct = (v) => `${cores(v)}%`;
  const history = [
    { title: "CPU %", query: `llmgw_node_cpu_utilization_percent{${sel}}`, max: 100, unit: pct, axis: "% of all cores", label: () => "CPU" },
    { title: "RAM used", query: `llmgw_node_memory_used_bytes{${sel}}`, unit: fmt.bytes, axis: "bytes", label: () => "used" },
    { title: "Load", query: `llmgw_node_load{${sel}}`, unit: count, axis: "runnable tasks", label: (m) => m.window || "load" },
    { title: "Cores per model", query: `sum by (model) (llmgw_shard_cpu_cores{${sel}})`, unit: cores, axis: "cores", optional: true, label: (m) => m.model },
    { title: "Memory per model", query: `sum by (model) (llmgw_shard_memory_bytes{${sel}})`, unit: fmt.bytes, axis: "bytes", optional: true, label: (m) => m.model },
    // The gateway's queue for the models with a shard here; a shard's memory is what says it runs here.
    { title: "Queue depth", query: `sum by (model) (llmgw_gateway_queue_depth and on (model) llmgw_shard_memory_bytes{${sel}})`, unit: count, axis: "requests waiting", optional: true, label: (m) => m.model },
  ];
  async function drawHistory() {
    const box = $("charts");
    for (const spec of history) {
      const got = await Charts.draw(box, spec);
      // Per-model series exist only once a shard runs here: no empty boxes for them.
      const none = got.configured && !got.error && !(got.series || []).length;
      spec.box.hidden = Boolean(spec.optional && (none || !got.configured));
    }
  }

  async function refresh() {
    const d = await LG.getJSON(`/console/api/nodes/${encodeURIComponent(name)}`);
    now(d); replicas(d); engines(d); gpus(d); nvlink(d); domain(d); ports(d); sensors(d);
    $("prom-note").textContent = d.prometheus ? "from Prometheus" : "Prometheus is not configured (LLMGW_PROMETHEUS_URL)";
    root.dispatchEvent(new CustomEvent("node:data", { detail: d }));
    root.dataset.loaded = String(Number(root.dataset.loaded || 0) + 1);
  }

  window.NodePage = { refresh };
  refresh().then(drawHistory);
  setInterval(() => { drawHistory(); drawGpuCharts(); }, 60000);
  // "models changed" names the nodes a burst of placements touched (null: many).
  LG.live(["node changed", "fabric changed", "nvlink changed", "models changed"], 10000, (ev) =>
    ev === "poll" || (ev.kind === "models changed"
      ? !ev.nodes || ev.nodes.includes(name)
      : !ev.node || ev.node === name) ? refresh() : null);
})();
