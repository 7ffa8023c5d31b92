// The node page's cordon and labels: shown to everyone, changed by an
// operator through the node API (/api/v1/nodes/<name>/cordon, /uncordon,
// /labels), the calls `llmgw ctl cordon` and `ctl label` make. The forms
// are in the page only for an operator: a viewer gets no control that
// could only answer 403.
(function () {
  "use strict";
  const { el, request, when, fmt } = LG;
  const root = document.getElementById("node");
  const api = `/api/v1/nodes/${encodeURIComponent(root.dataset.name)}`;
  const cordonForm = document.getElementById("cordon-form");
  const labelForm = document.getElementById("label-form");
  const $ = (id) => document.getElementById(id);
  let node = null;

  function say(text, bad) {
    const note = $("action-note");
    note.textContent = text;
    note.className = `action-note ${bad ? "bad" : "ok"}`;
  }

  async function act(path, body, done) {
    const r = await request("POST", `${api}/${path}`, body);
    if (!r.ok) {
      const d = r.data || {};
      const why = d.detail || Object.entries(d).map(([k, v]) => `${k}: ${[].concat(v).join(" ")}`).join("; ");
      say(`Not done: ${why || `HTTP ${r.status}`}`, true);
      return false;
    }
    say(done, false);
    await window.NodePage.refresh();
    return true;
  }

  function cordon(d) {
    $("cordon-state").replaceChildren(...(d.cordoned
      ? [el("b", { class: "warn" }, "Cordoned"), ` by ${fmt.dash(d.cordoned_by)} `, when(d.cordoned_at), ": ",
        el("span", { class: "reason" }, d.cordon_reason || "no reason given"), ". No new replica is placed here."]
      : ["Schedulable: placement may put new replicas here."]));
    if (!cordonForm) return;
    cordonForm.querySelector("button").textContent = d.cordoned ? "Uncordon" : "Cordon";
    cordonForm.elements.reason.placeholder = d.cordoned ? "reason (optional, kept in the audit log)" : "reason (needed to cordon)";
  }

  function labels(d) {
    const mine = d.operator_labels || {};
    const agent = d.agent_labels || {};
    const all = Object.entries(d.labels || {}).sort(([a], [b]) => a.localeCompare(b));
    const items = all.map(([k, v]) => {
      const set = k in mine;
      const under = set && k in agent && agent[k] !== v ? ` (agent: ${agent[k]})` : "";
      const remove = set && labelForm
        ? el("button", { type: "button", class: "remove", "data-key": k, title: `remove the operator's ${k}` }, "×") : "";
      return el("li", { "data-key": k }, [el("code", {}, `${k}=${v}`),
        el("small", { class: "dim" }, set ? ` set by an operator${under}` : " from the agent"), remove ? " " : "", remove]);
    });
    $("label-list").replaceChildren(items.length ? el("ul", { class: "label-list" }, items) : el("p", { class: "dim" }, "No label."));
  }

  root.addEventListener("node:data", (e) => { node = e.detail; cordon(node); labels(node); });

  if (cordonForm) {
    cordonForm.addEventListener("submit", (e) => {
      e.preventDefault();
      const reason = cordonForm.elements.reason.value.trim();
      if (node && node.cordoned) {
        act("uncordon", { reason }, "Uncordoned.").then((ok) => ok && cordonForm.reset());
      } else if (!reason) {
        say("A cordon needs a reason: the next operator will ask why.", true);
      } else {
        act("cordon", { reason }, "Cordoned.").then((ok) => ok && cordonForm.reset());
      }
    });
  }
  if (labelForm) {
    labelForm.addEventListener("submit", (e) => {
      e.preventDefault();
      const key = labelForm.elements.key.value.trim();
      const value = labelForm.elements.value.value.trim();
      if (!key || !value) {
        say(`${key ? "value" : "key"}: needed (remove a label with its ×)`, true);
        return;
      }
      act("labels", { labels: { [key]: value } }, `Label ${key}=${value} set.`).then((ok) => ok && labelForm.reset());
    });
    $("label-list").addEventListener("click", (e) => {
      const key = e.target.dataset && e.target.dataset.key;
      if (e.target.matches("button.remove") && key) act("labels", { labels: { [key]: null } }, `Label ${key} removed.`);
    });
  }
})();
