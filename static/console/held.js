// Held models: the list (ready against the count held now, a word for where
// each stands, its last placement) and a model's card (replicas, headroom,
// the counts form, the placement explanation grouped by reason). A refused
// count shows the API's reason and its explanation; nothing is assumed to
// have changed until the API says so. Live over /ws/console.
(function () {
  "use strict";
  const { el, fmt } = LG;
  const card = document.getElementById("card");
  let current = null;

  const layout = document.querySelector(".held-layout");
  // A viewer's page has no control that could only answer 403.
  const canOperate = layout.dataset.canOperate === "true";

  // The explanation as the server groups it (`llmgw ctl explain` prints the
  // same groups): the lines before the profiles tried, then each profile's
  // reasons once, with how many nodes, the first few named and one node's
  // own words; opening a reason lists every node it refused. `full` gives
  // every node when asked (the card asks the API for a few a reason).
  const NAMED = 3;
  const nodeLink = (n) => el("a", { href: `/nodes/${encodeURIComponent(n)}` }, n);

  function reasonItem(attempt, r, full) {
    const shown = r.nodes.slice(0, NAMED).map((n) => n.node);
    const more = r.count - shown.length;
    const names = [...shown.flatMap((n, i) => [i ? ", " : "", nodeLink(n)]), more > 0 ? ` and ${more} more` : ""];
    // In the words of `llmgw ctl explain`'s line for it.
    const head = el("div", { class: "reason-head" }, [
      el("b", { class: "count" }, `${r.count} node${r.count === 1 ? "" : "s"}`), ": ",
      el("span", { class: "summary" }, r.summary), " (", el("code", {}, r.code), "): ",
      el("span", { class: "names" }, names),
    ]);
    const eg = r.nodes.length ? el("div", { class: "eg" }, ["e.g. ", r.nodes[0].message]) : null;
    if (r.count < 2) return el("li", { class: "reason", "data-code": r.code }, [head, eg]);
    const list = el("ul", { class: "every" });
    const fill = (nodes) => list.replaceChildren(...nodes.map((n) =>
      // Each message opens with its node's name, here the link before it.
      el("li", { "data-node": n.node }, [nodeLink(n.node), el("span", { class: "message" },
        n.message.startsWith(`${n.node} `) ? n.message.slice(n.node.length) : ` ${n.message}`)])));
    const box = el("details", { class: "all-nodes" }, [el("summary", {}, `every node (${r.count})`), list]);
    box.addEventListener("toggle", async () => {
      if (!box.open || list.childElementCount) return;
      if (r.nodes.length >= r.count) { fill(r.nodes); return; }
      list.replaceChildren(el("li", { class: "dim" }, "loading…"));
      const ex = await full();
      const a = (ex.attempts || []).find((x) => x.profile === attempt.profile);
      const all = a && a.reasons.find((x) => x.code === r.code);
      fill(all ? all.nodes : r.nodes);
    });
    return el("li", { class: "reason", "data-code": r.code }, [head, eg, box]);
  }

  function explanation(ex, full) {
    const attempts = (ex && ex.attempts) || [];
    const heading = (ex && (ex.heading || (attempts.length ? [] : ex.lines))) || [];
    if (!heading.length && !attempts.length) return el("p", { class: "dim" }, "No explanation.");
    const fetchAll = full || (async () => ex);
    return el("div", { class: "explanation" }, [
      heading.length ? el("pre", { class: "heading" }, heading.join("\n")) : null,
      ...attempts.map((a) => el("div", { class: "attempt", "data-profile": a.profile }, [
        el("div", { class: `verdict ${a.placed ? "ok" : "bad"}` }, `profile ${a.profile} (priority ${a.priority}): ${a.placed ? "placed" : "does not fit"}`),
        a.reasons.length ? el("ul", { class: "reasons" }, a.reasons.map((r) => reasonItem(a, r, fetchAll))) : null,
      ])),
    ]);
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

  // Read only: the counts as they are, for a role that cannot change them.
  function counts(m) {
    if (canOperate) return form(m);
    return el("p", { class: "counts-read" }, [`always running ${m.always_running}, under load ${m.under_load}`,
      el("span", { class: "dim" }, " (an operator changes them)")]);
  }

  const key = (d) => `${d.closest(".attempt").dataset.profile}\u0000${d.closest(".reason").dataset.code}`;

  // A model's card; `again`: the same model read again (a live event, a
  // save), keeping what the reader is doing: a count being typed, the
  // last save's answer, the reasons opened, the what-if's answers.
  async function open(name, again) {
    current = name;
    const base = `/api/v1/models/${encodeURIComponent(name)}`;
    const [m, ex] = await Promise.all([LG.getJSON(base), LG.getJSON(`${base}/explain?nodes=${NAMED}`)]);
    if (current !== name) return;
    let every = null;
    const full = () => (every = every || LG.getJSON(`${base}/explain`));
    const same = again && card.dataset.model === name;
    const was = same ? card.querySelector(".counts-section") : null;
    const typing = was && was.contains(document.activeElement) && document.activeElement.tagName === "INPUT";
    const section = typing ? was : el("div", { class: "counts-section" }, counts(m));
    const result = was && !typing ? was.querySelector(".result") : null;
    if (result && section.querySelector(".result")) section.querySelector(".result").replaceWith(result);
    const opened = same ? [...card.querySelectorAll(".reason details[open]")].map(key) : [];
    const keepWhatif = same && card.dataset.always === String(m.always_running);
    const whatif = (keepWhatif && card.querySelector(".whatif")) || LG.whatif(m);
    card.hidden = false;
    card.dataset.model = name;
    card.dataset.always = String(m.always_running);
    card.replaceChildren(
      el("h2", {}, [m.name, el("small", { class: "dim" }, ` ${m.source || ""}`)]),
      el("h3", {}, "Replicas"), replicas(m),
      el("h3", {}, "Weights by fabric"), weights(m),
      el("h3", {}, "Room for more"), headroom(m),
      el("h3", {}, "Counts"), section,
      el("h3", {}, "Placement"), explanation(ex, full),
      el("h3", {}, "What if a rack, PDU or node failed"), whatif,
    );
    for (const d of card.querySelectorAll(".reason details")) if (opened.includes(key(d))) d.open = true;
    for (const r of document.querySelectorAll("#models tr.on")) r.classList.remove("on");
    const row = document.querySelector(`tr[data-model="${CSS.escape(name)}"]`);
    if (row) row.replaceWith(listRow(m));
  }

  // A row of the list, as the page first drew it (templates/held.html).
  function listRow(m) {
    const h = m.held || {};
    const lp = h.last_placement;
    const cls = [h.state === "not held" ? "dim" : "", m.name === current ? "on" : ""].join(" ").trim();
    return el("tr", { "data-model": m.name, "data-state": h.state, class: cls || null }, [
      el("td", {}, el("a", { href: `#${encodeURIComponent(m.name)}`, class: "open" }, m.name)),
      el("td", { class: "held-state" }, el("span", { class: `held-word ${(h.state || "").replace(" ", "")}`, title: h.state_means }, fmt.dash(h.state))),
      el("td", { class: "ready" }, `${fmt.dash(h.ready)}/${fmt.dash(h.target)}`),
      el("td", { class: "always" }, String(m.always_running)),
      el("td", { class: "load" }, String(m.under_load)),
      el("td", { class: "placed" }, lp ? [LG.when(lp.at), ...(lp.placed ? [] : [" ", el("span", { class: "bad" }, "refused")])] : "never"),
    ]);
  }

  async function list() {
    const models = await LG.getJSON("/api/v1/models");
    const body = document.querySelector("#models tbody");
    if (models.length) body.replaceChildren(...models.map(listRow));
  }

  const fromHash = () => { const n = decodeURIComponent(location.hash.slice(1)); if (n) open(n).catch((e) => console.warn(e.message)); };
  window.addEventListener("hashchange", fromHash);
  fromHash();
  list().catch((e) => console.warn(e.message));
  // Placements, releases and held counts changed: the list and the open card again.
  LG.live(["models changed"], 15000, async () => {
    await list();
    if (current) await open(current, true);
  });
})();
