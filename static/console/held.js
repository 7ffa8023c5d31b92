// Held models: a model's card (replicas, headroom, the counts form, the
// placement explanation). A refused count shows the API's reason and its
// explanation; nothing is assumed to have changed until the API says so.
(function () {
  "use strict";
  const { el, fmt } = LG;
  const card = document.getElementById("card");
  let current = null;

  // The server renders the explanation, the lines `llmgw ctl explain`
  // prints (names, numbers, when it was made, what became of its replica);
  // the page shows them as they are rather than saying it a third way.
  function explanation(ex) {
    const lines = (ex && ex.lines) || [];
    if (!lines.length) return el("p", { class: "dim" }, "No explanation.");
    return el("pre", { class: "explanation" }, lines.join("\n"));
  }

  function replicas(m) {
    const profiles = Object.fromEntries((m.profiles || []).map((p) => [p.name, p]));
    const list = m.replicas || [];
    if (!list.length) return el("p", { class: "dim" }, "No replica.");
    const rows = list.flatMap((r) => (r.nodes.length ? r.nodes : [{ node: null }]).map((n) => {
      const p = profiles[r.profile] || {};
      return el("tr", { "data-replica": r.id }, [
        el("td", {}, `#${r.id} ${r.profile}`),
        el("td", {}, n.node ? el("a", { href: `/nodes/${encodeURIComponent(n.node)}` }, n.node) : LG.DASH),
        el("td", { class: "location" }, fmt.dash(n.location)),
        el("td", { class: `state ${r.state}` }, fmt.dash(r.state)),
        el("td", {}, fmt.age(r.age_s)),
        el("td", {}, LG.known(p.cpu_cores) ? `${p.cpu_cores} cores` : LG.DASH),
        el("td", {}, LG.known(p.memory_gb) ? `${p.memory_gb} GiB` : LG.DASH),
        el("td", {}, n.gpus && n.gpus.length ? n.gpus.join(", ") : LG.DASH),
      ]);
    }));
    return el("table", { class: "grid" }, [
      el("thead", {}, el("tr", {}, ["Replica", "Node", "Where", "State", "Age", "CPU", "Memory", "GPUs"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows),
    ]);
  }

  // Per physical fabric, which of its nodes hold the weights (a multi-node
  // replica forms inside one fabric; where none holds them, a replica
  // downloads first), as `llmgw ctl status` says it. Nodes on no known
  // fabric are their own row, never counted on a fabric.
  function weights(m) {
    const groups = m.weights_by_fabric || [];
    if (!groups.length) return el("p", { class: "dim" }, `${LG.DASH} (no node)`);
    const nodeLinks = (names) => names.flatMap((n, i) =>
      [i ? ", " : "", el("a", { href: `/nodes/${encodeURIComponent(n)}` }, n)]);
    const rows = groups.map((g) => {
      const none = !g.holders.length;
      return el("tr", { "data-fabric": g.fabric === null ? "" : g.fabric, class: g.fabric === null ? "dim" : "" }, [
        el("td", { title: g.fabric || "" }, g.label),
        el("td", { class: `count ${none ? "bad" : "ok"}` }, none ? `none of ${g.nodes}` : `${g.holders.length}/${g.nodes} nodes`),
        el("td", { class: "holders" }, none ? LG.DASH : nodeLinks(g.holders)),
      ]);
    });
    return el("table", { class: "grid weights" }, [
      el("thead", {}, el("tr", {}, ["Fabric", "Holding", "Nodes holding the weights"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows),
    ]);
  }

  function headroom(m) {
    const room = m.headroom || {};
    const items = Object.entries(room);
    if (!items.length) return el("p", { class: "dim" }, "-");
    return el("ul", { class: "headroom" }, items.map(([p, n]) =>
      el("li", { "data-profile": p }, [el("b", { class: n ? "ok" : "bad" }, String(n)), ` more with profile ${p}`])));
  }

  function form(m) {
    const f = el("form", { class: "counts" }, [
      el("label", {}, ["Always running ", el("input", { name: "always_running", type: "number", min: 0, value: m.always_running })]),
      el("label", {}, ["Under load ", el("input", { name: "under_load", type: "number", min: 0, value: m.under_load })]),
      el("button", { type: "submit" }, "Save"),
      el("div", { class: "result", role: "status" }),
    ]);
    f.addEventListener("submit", async (e) => {
      e.preventDefault();
      const out = f.querySelector(".result");
      const body = { always_running: Number(f.always_running.value), under_load: Number(f.under_load.value) };
      out.replaceChildren("saving…");
      const r = await LG.request("PATCH", `/api/v1/models/${encodeURIComponent(m.name)}`, body);
      if (r.ok) { out.replaceChildren(el("span", { class: "ok" }, "saved")); await open(m.name, true); return; }
      const d = r.data || {};
      const detail = d.detail || Object.entries(d).map(([k, v]) => `${k}: ${v}`).join("; ") || `HTTP ${r.status}`;
      out.replaceChildren(el("div", { class: "refusal" }, [el("b", {}, "Refused: "), detail]),
        d.explanation && Object.keys(d.explanation).length ? explanation(d.explanation) : "");
    });
    return f;
  }

  async function open(name, keepResult) {
    current = name;
    const [m, ex] = await Promise.all([
      LG.getJSON(`/api/v1/models/${encodeURIComponent(name)}`),
      LG.getJSON(`/api/v1/models/${encodeURIComponent(name)}/explain`),
    ]);
    if (current !== name) return;
    const old = keepResult ? card.querySelector(".result") : null;
    card.hidden = false;
    card.dataset.model = name;
    card.replaceChildren(
      el("h2", {}, [m.name, el("small", { class: "dim" }, ` ${m.source || ""}`)]),
      el("h3", {}, "Replicas"), replicas(m),
      el("h3", {}, "Weights by fabric"), weights(m),
      el("h3", {}, "Room for more"), headroom(m),
      el("h3", {}, "Counts"), form(m),
      el("h3", {}, "Placement"), explanation(ex),
      el("h3", {}, "What if a rack, PDU or node failed"), LG.whatif(m),
    );
    if (old) card.querySelector(".result").replaceWith(old);
    const row = document.querySelector(`tr[data-model="${CSS.escape(name)}"]`);
    if (row) {
      row.querySelector(".always").textContent = m.always_running;
      row.querySelector(".load").textContent = m.under_load;
      row.querySelector(".replicas").textContent = (m.replicas || []).length;
    }
  }

  const fromHash = () => { const n = decodeURIComponent(location.hash.slice(1)); if (n) open(n).catch((e) => console.warn(e.message)); };
  window.addEventListener("hashchange", fromHash);
  fromHash();
})();
