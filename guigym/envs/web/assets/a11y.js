// guigym page helper, installed into every page as an init script (window.__guigym).
//
// snapshot(opts) walks the DOM (and same-origin iframes) once and returns
//   {xml: "<a11y ...>...</a11y>", nodes: N, truncated: bool, reason: str|null, ms: float}
// Each emitted node is an element with an ARIA role (explicit `role=` or the HTML-AAM implicit
// role of its tag), its accessible name, state attributes and its viewport box
// bbox="x,y,w,h" (CSS pixels == screenshot pixels at deviceScaleFactor 1).
// Generic containers (div/span without own text) are not emitted; their children take their
// place, the same flattening Chromium applies to "ignored" AX nodes.
// Ids are stable for the life of the page: stored on the element as data-guigym-id, so the
// same element keeps its id across steps while new elements get fresh ids.
(function () {
  if (window.__guigym) return;
  var ATTR = 'data-guigym-id';
  var state = { next: 1, byId: new Map() };
  var SKIP_TAGS = { SCRIPT: 1, STYLE: 1, NOSCRIPT: 1, TEMPLATE: 1, META: 1, LINK: 1, HEAD: 1, TITLE: 1, BR: 1 };
  var INPUT_ROLES = {
    button: 'button', submit: 'button', reset: 'button', image: 'button', checkbox: 'checkbox',
    radio: 'radio', range: 'slider', number: 'spinbutton', search: 'searchbox', email: 'textbox',
    tel: 'textbox', text: 'textbox', url: 'textbox', password: 'textbox', date: 'textbox',
    time: 'textbox', 'datetime-local': 'textbox', month: 'textbox', week: 'textbox', color: 'button',
    file: 'button'
  };
  var TAG_ROLES = {
    A: 'link', BUTTON: 'button', SELECT: 'combobox', OPTION: 'option', TEXTAREA: 'textbox',
    IMG: 'img', H1: 'heading', H2: 'heading', H3: 'heading', H4: 'heading', H5: 'heading',
    H6: 'heading', UL: 'list', OL: 'list', LI: 'listitem', TABLE: 'table', TR: 'row', TD: 'cell',
    TH: 'columnheader', LABEL: 'label', FORM: 'form', NAV: 'navigation', P: 'paragraph',
    SVG: 'graphics', CANVAS: 'canvas', DIALOG: 'dialog', PROGRESS: 'progressbar', HR: 'separator',
    FIELDSET: 'group', LEGEND: 'legend', IFRAME: 'iframe', MAIN: 'main', HEADER: 'banner',
    FOOTER: 'contentinfo', ASIDE: 'complementary', SECTION: 'region', ARTICLE: 'article',
    B: 'strong', STRONG: 'strong', EM: 'emphasis', I: 'emphasis', CODE: 'code', PRE: 'code',
    SUMMARY: 'button', DETAILS: 'group', OPTGROUP: 'group', DL: 'list', DT: 'term', DD: 'definition',
    CIRCLE: 'graphics-symbol', RECT: 'graphics-symbol', POLYGON: 'graphics-symbol',
    TEXT: 'graphics-text', LINE: 'graphics-symbol', ELLIPSE: 'graphics-symbol', PATH: 'graphics-symbol'
  };
  var ROLE_RE = /^[a-zA-Z][a-zA-Z0-9_-]*$/;

  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return c === '&' ? '&amp;' : c === '<' ? '&lt;' : c === '>' ? '&gt;' : '&quot;';
    }).replace(/[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]/g, '')
      .replace(/[\t\n\r]/g, ' ');
  }
  function clip(s, n) {
    s = (s || '').replace(/\s+/g, ' ').trim();
    return s.length > n ? s.slice(0, n - 1) + '\u2026' : s;
  }
  function ownText(el) {
    var out = '';
    for (var c = el.firstChild; c; c = c.nextSibling) if (c.nodeType === 3) out += c.data;
    return out.replace(/\s+/g, ' ').trim();
  }
  function roleOf(el) {
    var r = el.getAttribute && el.getAttribute('role');
    if (r) { r = r.split(/\s+/)[0]; if (ROLE_RE.test(r)) return r; }
    var tag = el.tagName.toUpperCase();
    if (tag === 'INPUT') {
      var t = (el.getAttribute('type') || 'text').toLowerCase();
      if (t === 'hidden') return null;
      return INPUT_ROLES[t] || 'textbox';
    }
    if (tag === 'A' && !el.hasAttribute('href')) return 'generic';
    if (tag === 'SELECT' && (el.multiple || el.size > 1)) return 'listbox';
    return TAG_ROLES[tag] || 'generic';
  }
  function labelText(el, doc) {
    var parts = [];
    var by = el.getAttribute('aria-labelledby');
    if (by) {
      by.split(/\s+/).forEach(function (id) { var t = doc.getElementById(id); if (t) parts.push(t.textContent); });
      if (parts.length) return parts.join(' ');
    }
    if (el.id) {
      try {
        var l = doc.querySelector('label[for="' + CSS.escape(el.id) + '"]');
        if (l) return l.textContent;
      } catch (e) { /* invalid id */ }
    }
    var p = el.closest && el.closest('label');
    if (p && p !== el) return p.textContent;
    return '';
  }
  function nameOf(el, role, doc) {
    var aria = el.getAttribute('aria-label');
    if (aria) return aria;
    var tag = el.tagName.toUpperCase();
    if (tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'SELECT') {
      var t = (el.type || '').toLowerCase();
      if (t === 'button' || t === 'submit' || t === 'reset') return el.value || t;
      return labelText(el, doc) || el.getAttribute('placeholder') || el.getAttribute('title') || '';
    }
    if (tag === 'IMG') return el.getAttribute('alt') || el.getAttribute('title') || '';
    if (role === 'generic' || role === 'paragraph' || role === 'label' || role === 'listitem' ||
        role === 'cell' || role === 'columnheader' || role === 'strong' || role === 'emphasis' ||
        role === 'term' || role === 'definition' || role === 'code' || role === 'graphics-text') {
      return ownText(el) || el.getAttribute('title') || '';
    }
    if (role === 'list' || role === 'table' || role === 'row' || role === 'form' || role === 'group' ||
        role === 'navigation' || role === 'region' || role === 'main' || role === 'iframe' ||
        role === 'graphics' || role === 'dialog' || role === 'tabpanel' || role === 'menu' ||
        role === 'tablist' || role === 'listbox' || role === 'radiogroup' || role === 'tree') {
      return el.getAttribute('title') || '';
    }
    return el.textContent || el.getAttribute('title') || '';
  }

  function snapshot(opts) {
    opts = opts || {};
    var cap = opts.nodeCap || 2000, timeCap = opts.timeCapMs || 200, nameCap = opts.nameCap || 120;
    var skipIds = opts.skipIds || [];
    // Lay the page out before the clock starts: the time cap bounds the walk, not work the page
    // left pending (on a starved renderer that alone can exceed the cap and empty the tree).
    if (document.body) document.body.getBoundingClientRect();
    var t0 = performance.now(), count = 0, visited = 0, truncated = false, reason = null;
    var out = [];
    state.byId = new Map();

    function walk(el, dx, dy, depth, doc, win) {
      if (truncated) return;
      if (count >= cap) { truncated = true; reason = 'node cap ' + cap + ' reached'; return; }
      // the clock is read every 32 elements visited (not emitted: a run of unnamed divs emits none)
      if ((++visited & 31) === 0 && performance.now() - t0 > timeCap) {
        truncated = true; reason = 'time cap ' + timeCap + ' ms reached'; return;
      }
      var tag = el.tagName.toUpperCase();
      if (SKIP_TAGS[tag]) return;
      if (el.id && skipIds.indexOf(el.id) >= 0) return;
      var style = win.getComputedStyle(el);
      if (style.display === 'none') return;
      var role = roleOf(el);
      if (role === null) return;
      var rect = el.getBoundingClientRect();
      var visible = style.visibility !== 'hidden' && rect.width > 0 && rect.height > 0;
      var name = visible ? nameOf(el, role, doc) : '';
      var emit = visible && (role !== 'generic' || ownText(el) !== '' || el.onclick ||
                             el.tabIndex >= 0 || el.isContentEditable);
      var openIdx = -1;
      if (emit) {
        count++;
        var id = el.getAttribute(ATTR);
        if (!id) { id = String(state.next++); el.setAttribute(ATTR, id); }
        state.byId.set(id, { el: el, dx: dx, dy: dy });
        var a = '<' + role + ' id="' + id + '"';
        name = clip(name, nameCap);
        if (name) a += ' name="' + esc(name) + '"';
        if (tag === 'INPUT' || tag === 'TEXTAREA' || tag === 'SELECT') {
          var t = (el.type || '').toLowerCase();
          if (t === 'checkbox' || t === 'radio') a += ' checked="' + (el.checked ? 'true' : 'false') + '"';
          else if (t !== 'button' && t !== 'submit' && t !== 'reset') a += ' value="' + esc(clip(el.value, nameCap)) + '"';
        }
        if (tag === 'OPTION' && el.selected) a += ' selected="true"';
        if (tag === 'TEXTAREA') a += ' multiline="true"';
        if (el.disabled) a += ' disabled="true"';
        var exp = el.getAttribute('aria-expanded');
        if (exp) a += ' expanded="' + esc(exp) + '"';
        var sel = el.getAttribute('aria-selected');
        if (sel) a += ' selected="' + esc(sel) + '"';
        var chk = el.getAttribute('aria-checked');
        if (chk && a.indexOf(' checked=') < 0) a += ' checked="' + esc(chk) + '"';
        if (doc.activeElement === el && el !== doc.body) a += ' focused="true"';
        if (/^H[1-6]$/.test(tag)) a += ' level="' + tag[1] + '"';
        if (tag === 'A' && el.getAttribute('href')) a += ' href="' + esc(clip(el.getAttribute('href'), 200)) + '"';
        a += ' bbox="' + Math.round(rect.left + dx) + ',' + Math.round(rect.top + dy) + ',' +
             Math.round(rect.width) + ',' + Math.round(rect.height) + '"';
        openIdx = out.length;
        out.push(a + '>');
      }
      if (tag === 'SELECT' && emit) {
        // a closed <select> lays out no options; list them anyway, as Chromium's AX tree does
        for (var k = 0; k < el.options.length && count < cap; k++) {
          var opt = el.options[k];
          count++;
          var oid = opt.getAttribute(ATTR);
          if (!oid) { oid = String(state.next++); opt.setAttribute(ATTR, oid); }
          state.byId.set(oid, { el: opt, dx: dx, dy: dy });
          out.push('<option id="' + oid + '" name="' + esc(clip(opt.text, nameCap)) + '"' +
                   (opt.selected ? ' selected="true"' : '') + (opt.disabled ? ' disabled="true"' : '') + '/>');
        }
      } else if (tag === 'IFRAME') {
        var cd = null;
        try { cd = el.contentDocument; } catch (e) { cd = null; }
        if (cd && cd.body) walk(cd.body, dx + rect.left + el.clientLeft, dy + rect.top + el.clientTop, depth + 1, cd, el.contentWindow);
      } else {
        for (var c = el.firstElementChild; c; c = c.nextElementSibling) walk(c, dx, dy, depth + 1, doc, win);
      }
      if (emit) {
        if (out.length === openIdx + 1) out[openIdx] = out[openIdx].slice(0, -1) + '/>';
        else out.push('</' + role + '>');
      }
    }
    var root = document.body || document.documentElement;
    if (root) walk(root, 0, 0, 0, document, window);
    var ms = performance.now() - t0;
    var head = '<a11y nodes="' + count + '" truncated="' + (truncated ? 'true' : 'false') + '"' +
               (reason ? ' reason="' + esc(reason) + '"' : '') + '>';
    return { xml: head + out.join('') + '</a11y>', nodes: count, truncated: truncated, reason: reason, ms: ms };
  }

  // Centre of an element in viewport pixels, or an explanation why it has none.
  function center(id) {
    var rec = state.byId.get(String(id));
    if (!rec) {
      var el = document.querySelector('[' + ATTR + '="' + String(id).replace(/"/g, '') + '"]');
      if (!el) return { error: 'no element with id ' + id + ' in the last observation' };
      rec = { el: el, dx: 0, dy: 0 };
    }
    if (!rec.el.isConnected) return { error: 'element ' + id + ' is no longer on the page' };
    var r = rec.el.getBoundingClientRect();
    if (r.width <= 0 || r.height <= 0) return { error: 'element ' + id + ' is not visible' };
    return { x: rec.dx + r.left + r.width / 2, y: rec.dy + r.top + r.height / 2, tag: rec.el.tagName };
  }

  // Select an <option> of a <select> by visible label or value, firing the events a user would.
  function selectOption(id, option) {
    var rec = state.byId.get(String(id));
    if (!rec || !rec.el.isConnected) return 'no element with id ' + id + ' on the page';
    var el = rec.el;
    if (el.tagName.toUpperCase() !== 'SELECT') return 'element ' + id + ' is a ' + el.tagName.toLowerCase() + ', not a select';
    for (var i = 0; i < el.options.length; i++) {
      var o = el.options[i];
      if (o.text.trim() === option || o.value === option) {
        el.selectedIndex = i;
        el.dispatchEvent(new Event('input', { bubbles: true }));
        el.dispatchEvent(new Event('change', { bubbles: true }));
        return null;
      }
    }
    return 'select ' + id + ' has no option ' + JSON.stringify(option);
  }

  Object.defineProperty(window, '__guigym', {
    value: { snapshot: snapshot, center: center, selectOption: selectOption },
    enumerable: false
  });
})();
