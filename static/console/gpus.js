// Every card of the fleet, one tile each, grouped by node and coloured by
// health and wear; refreshed every ~15 s or on a pushed change.
(function () {
  "use strict";
  const { el, fmt } = LG;
  const map = document.getElementById("map");

  // Why a card looks worn, in words, and how worn (0 none, 1 some, 2 worn):
  // worked out on the server (gpu_health.wear), which the node page shows too.
  function wear(g) { return g.wear; }

  function tile(node, g) {
    const w = wear(g);
    const cls = g.missing ? "missing" : !g.healthy ? "unhealthy" : ["healthy", "worn1", "worn2"][w.level];
    const s = g.sample || {};
    const title = [`${node}/GPU ${g.index} · ${g.gpu_class || "-"}`, g.uuid,
      g.missing ? "missing from the bus" : g.healthy ? "healthy" : `held out: ${g.unhealthy_reason}`,
      ...w.why, g.nvlink_problem ? `NVLink: ${g.nvlink_problem}` : "",
      `utilisation ${fmt.pct(s.utilization_percent)} · ${fmt.num(s.temperature_c, 0)} °C`].filter(Boolean).join("\n");
    const util = LG.known(s.utilization_percent) ? s.utilization_percent : 0;
    return el("a", { class: `gpu ${cls} ${g.nvlink_problem ? "nvl-out" : ""}`, href: `/nodes/${encodeURIComponent(node)}`, title, "data-uuid": g.uuid, "data-state": cls }, [
      el("span", { class: "idx" }, String(g.index)),
      el("span", { class: "util", style: `height:${util.toFixed(0)}%` }),
    ]);
  }

  async function refresh() {
    const d = await LG.getJSON("/console/api/gpus");
    let total = 0, out = 0, worn = 0, silent = 0;
    const groups = d.nodes.map((n) => {
      total += n.gpus.length;
      // A NotReady node's cards are as it last said them: counted apart.
      if (n.state !== "Ready") silent += n.gpus.length;
      out += n.gpus.filter((g) => !g.healthy || g.missing).length;
      worn += n.gpus.filter((g) => g.healthy && wear(g).level).length;
      return el("div", { class: `gpu-node ${n.state === "Ready" ? "" : "down"}`, "data-node": n.name }, [
        el("div", { class: "gpu-node-name" }, [el("a", { href: `/nodes/${encodeURIComponent(n.name)}` }, n.name), el("small", {}, ` ${n.gpus[0].gpu_class || "-"}`)]),
        el("div", { class: "gpu-tiles" }, n.gpus.map((g) => tile(n.name, g))),
      ]);
    });
    map.replaceChildren(...(groups.length ? groups : [el("p", { class: "dim" }, "No GPU in the fleet.")]));
    document.getElementById("summary").textContent = `${total} cards${silent ? ` (${silent} on NotReady nodes)` : ""} · ${out} held out · ${worn} showing wear`;
    map.dataset.loaded = String(Number(map.dataset.loaded || 0) + 1);
  }

  refresh();
  LG.live(["node changed", "nvlink changed"], 15000, refresh);
})();
