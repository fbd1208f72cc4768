// The expression editor: CodeMirror 6 (rules/static/rules/vendor/codemirror/editor.bundle.js, window.LlamonCM)
// over the rule form's `when` and `params` textareas (textarea[data-expr-editor]).
//
// Progressive enhancement: the textarea stays the form's field. Every edit is copied into it and
// announced with an input event, so the live check (#rule-errors) and the live tester run as they
// did; a value put into the textarea by other code (the params skeleton button) is copied back.
// Without JavaScript the plain textarea is what the user edits and posts.
//
// Strict CSP: CodeMirror injects its base styles with style-mod, which uses a <style> element in a
// document but a constructed stylesheet (adoptedStyleSheets) in a shadow root. The editor therefore
// lives in a shadow root of its own, with rules/static/rules/css/expr-editor.css linked into it; no inline style.
//
// Keyboard: Tab is not bound (no indentWithTab), so Tab and Shift+Tab leave the editor as they leave
// a textarea. Ctrl+Space opens completion, Escape closes it, Ctrl+Shift+M lists the problems.
(function () {
  "use strict";
  const CM = window.LlamonCM;
  if (!CM) return;

  const KEYWORDS = ["and", "or", "not", "in", "is", "if", "else", "for", "True", "False", "None"];
  const SYNC = "llamon.sync"; // the user event of a copy from the textarea into the editor
  // The words the completion and the checker's place show, in the page's language (the vocabulary's
  // "words", rules.engine.expression_vocabulary); English until a form gives them.
  const WORDS = {
    required: "required",
    param: "param",
    tool: "tool",
    request: "request",
    builtin: "builtin",
    place: "line %(line)s, column %(column)s: ",
  };

  function readJSON(element, attribute) {
    try {
      return JSON.parse(element.getAttribute(attribute) || "null");
    } catch (error) {
      return null;
    }
  }

  // The chosen server's tool names and the chosen tool's params keys. #tool-info is swapped by htmx
  // when the server or the tool changes, so it is read at each completion, never cached.
  function toolCompletions() {
    const info = document.getElementById("tool-info");
    const data = info && readJSON(info, "data-expr-completions");
    return { tools: (data && data.tools) || [], params: (data && data.params) || [] };
  }

  // The string literal the cursor is in on this line, if any: {quote, text, index}.
  function openString(before) {
    const pattern = /"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|(["'])((?:[^"'\\]|\\.)*)$/g;
    let match;
    let open = null;
    while ((match = pattern.exec(before))) {
      if (match[1]) open = { quote: match[1], text: match[2], index: match.index };
      if (match[0] === "") pattern.lastIndex++;
    }
    return open;
  }

  // A dict key is expected after "{" or "," (what comes before the key on this line or the last one).
  function atKeyPosition(state, from) {
    const text = state.doc.sliceString(Math.max(0, from - 200), from).trimEnd();
    return text.endsWith("{") || text.endsWith(",");
  }

  function callApply(name) {
    return function (view, completion, from, to) {
      view.dispatch({
        changes: { from: from, to: to, insert: name + "()" },
        selection: { anchor: from + name.length + 1 },
        userEvent: "input.complete",
      });
    };
  }

  // Completes a quoted name: replaces the opening quote (when the range starts after it), what was
  // typed, and the closing quote closeBrackets may have put there already.
  function stringApply(text, quote, suffix, afterQuote) {
    return function (view, completion, from, to) {
      const start = afterQuote ? from - 1 : from;
      const end = view.state.doc.sliceString(to, to + 1) === quote ? to + 1 : to;
      const insert = quote + text + quote + suffix;
      view.dispatch({
        changes: { from: start, to: end, insert: insert },
        selection: { anchor: start + insert.length },
        userEvent: "input.complete",
      });
    };
  }

  function paramOption(param, quote, afterQuote) {
    return {
      label: param.name,
      type: "property",
      detail: (param.type || "") + (param.required ? " · " + WORDS.required : "") + " · " + WORDS.param,
      info: param.description || undefined,
      apply: stringApply(param.name, quote, ": ", afterQuote),
      boost: param.required ? 2 : 1,
    };
  }

  function completionSource(field, vocabulary) {
    return function (context) {
      const state = context.state;
      const pos = context.pos;
      const line = state.doc.lineAt(pos);
      const before = line.text.slice(0, pos - line.from);
      const known = toolCompletions();

      const string = openString(before);
      if (string) {
        const quoteAt = line.from + string.index;
        let options;
        if (field === "params" && atKeyPosition(state, quoteAt)) {
          options = known.params.map((param) => paramOption(param, string.quote, true));
        } else {
          options = known.tools.map((tool) => ({
            label: tool.name,
            type: "constant",
            detail: WORDS.tool,
            info: tool.description || undefined,
            apply: stringApply(tool.name, string.quote, "", true),
          }));
        }
        return options.length ? { from: quoteAt + 1, options: options } : null;
      }

      const member = /([A-Za-z_][A-Za-z0-9_]*)\s*\.\s*([A-Za-z_0-9]*)$/.exec(before);
      if (member) {
        const names = member[1] === "ctx" ? vocabulary.ctx_attrs : vocabulary.methods;
        return {
          from: pos - member[2].length,
          options: names.map((name) => ({
            label: name,
            type: member[1] === "ctx" ? "property" : "method",
          })),
          validFor: /^[A-Za-z0-9_]*$/,
        };
      }

      const word = context.matchBefore(/[A-Za-z_][A-Za-z0-9_]*/);
      if (!word && !context.explicit) return null;
      const from = word ? word.from : pos;
      const options = [];
      if (field === "params" && atKeyPosition(state, from)) {
        known.params.forEach((param) => options.push(paramOption(param, '"', false)));
      }
      vocabulary.names.forEach((name) => options.push({ label: name, type: "variable", detail: WORDS.request }));
      vocabulary.helpers.forEach((helper) =>
        options.push({
          label: helper.name,
          type: "function",
          detail: helper.signature,
          info: helper.info || undefined,
          apply: callApply(helper.name),
          boost: 1,
        }),
      );
      vocabulary.builtins.forEach((name) =>
        options.push({ label: name, type: "function", detail: WORDS.builtin, apply: callApply(name) }),
      );
      KEYWORDS.forEach((name) => options.push({ label: name, type: "keyword" }));
      return { from: from, options: options, validFor: /^[A-Za-z0-9_]*$/ };
    };
  }

  // The document range of a 1-based (line, column) from the compile check. Columns count code
  // points (Python's), the document counts UTF-16 units; the range covers the word found there.
  function diagnosticRange(doc, line, column) {
    if (!line) {
      const first = doc.line(1);
      return { from: first.from, to: first.to };
    }
    const target = doc.line(Math.min(Math.max(line, 1), doc.lines));
    let offset = 0;
    let count = 1;
    for (const character of target.text) {
      if (count >= (column || 1)) break;
      offset += character.length;
      count += 1;
    }
    const from = target.from + offset;
    const word = /^[\p{L}\p{N}_]+/u.exec(target.text.slice(offset));
    const to = word ? from + word[0].length : Math.min(from + 1, target.to);
    return { from: from, to: to };
  }

  function expressionLinter(form, field) {
    const url = form.getAttribute("data-expr-check-url");
    const token = form.querySelector("input[name=csrfmiddlewaretoken]");
    return CM.linter(
      async function (view) {
        const doc = view.state.doc;
        if (!doc.toString().trim()) return []; // a new rule: nothing typed yet is not an error
        const body = new URLSearchParams({ field: field, source: doc.toString() });
        let data;
        try {
          const response = await fetch(url, {
            method: "POST",
            body: body,
            credentials: "same-origin",
            headers: { "X-CSRFToken": token ? token.value : "" },
          });
          if (!response.ok) return [];
          data = await response.json();
        } catch (error) {
          return []; // offline or logged out: the form's own check still runs on save
        }
        return (data.diagnostics || []).map(function (item) {
          const range = diagnosticRange(doc, item.line, item.column);
          return {
            from: range.from,
            to: range.to,
            severity: "error",
            message: item.line
              ? WORDS.place.replace("%(line)s", item.line).replace("%(column)s", item.column) + item.message
              : item.message,
          };
        });
      },
      { delay: 300 },
    );
  }

  // Typing over a selection that spans highlighted tokens makes Chromium's own editing keep the
  // first token's colour with a <span style="color: ..."> (a style attribute, which the CSP refuses
  // and reports). Such input is applied by CodeMirror instead, through its input handlers (so a
  // bracket typed over a selection still wraps it). An IME composition (Korean) cannot be taken
  // over: the selection is deleted through CodeMirror on the key press that starts it.
  // What the browser is about to replace, read from the event or the DOM, never from the editor state
  // alone: the DOM selection may have changed in this same task (a script or a test selecting all,
  // then typing) before CodeMirror's selectionchange handler copied it into the state.
  function replacedRange(event, view) {
    const targets = event.getTargetRanges ? event.getTargetRanges() : [];
    if (targets.length) {
      try {
        const a = view.posAtDOM(targets[0].startContainer, targets[0].startOffset);
        const b = view.posAtDOM(targets[0].endContainer, targets[0].endOffset);
        return { from: Math.min(a, b), to: Math.max(a, b) };
      } catch (error) {
        // a range outside the editor's content: fall back to the editor's own selection
      }
    }
    // Chromium gives no target range for text inserted by the DevTools protocol (what automation
    // and some input tools use): read the live DOM selection (a shadow root has its own in Chromium).
    const selection = view.root.getSelection ? view.root.getSelection() : document.getSelection();
    const content = view.contentDOM;
    if (selection && selection.rangeCount && content.contains(selection.anchorNode) && content.contains(selection.focusNode)) {
      try {
        const a = view.posAtDOM(selection.anchorNode, selection.anchorOffset);
        const b = view.posAtDOM(selection.focusNode, selection.focusOffset);
        return { from: Math.min(a, b), to: Math.max(a, b) };
      } catch (error) {
        // fall through to the editor's own selection
      }
    }
    const main = view.state.selection.main;
    return { from: main.from, to: main.to };
  }

  const replaceSelectionInput = CM.EditorView.domEventHandlers({
    beforeinput(event, view) {
      if (event.isComposing || !event.data) return false;
      if (event.inputType !== "insertText" && event.inputType !== "insertReplacementText") return false;
      const range = replacedRange(event, view);
      if (!range || range.from === range.to) return false;
      event.preventDefault();
      const text = event.data;
      const insert = () =>
        view.state.update({
          changes: { from: range.from, to: range.to, insert: text },
          selection: { anchor: range.from + text.length },
          userEvent: "input.type",
        });
      const handlers = view.state.facet(CM.EditorView.inputHandler);
      if (!handlers.some((handler) => handler(view, range.from, range.to, text, insert))) {
        view.dispatch(insert());
      }
      return true;
    },
    keydown(event, view) {
      const composing = event.isComposing || event.keyCode === 229 || event.key === "Process";
      if (composing && !view.composing && !view.state.selection.main.empty) {
        view.dispatch(view.state.replaceSelection(""), { userEvent: "delete.selection" });
      }
      return false;
    },
  });

  function enhance(textarea) {
    if (textarea.hasAttribute("data-expr-enhanced")) return;
    const form = textarea.form;
    if (!form || !form.hasAttribute("data-expr-check-url")) return;
    const field = textarea.getAttribute("data-expr-editor");
    const vocabulary = Object.assign(
      { names: [], ctx_attrs: [], helpers: [], builtins: [], methods: [] },
      readJSON(form, "data-expr-vocabulary") || {},
    );
    Object.assign(WORDS, vocabulary.words || {});
    textarea.setAttribute("data-expr-enhanced", "");

    const host = document.createElement("div");
    host.className = "expr-editor-host";
    host.setAttribute("data-expr-field", field);
    const root = host.attachShadow({ mode: "open" });
    const sheet = document.createElement("link");
    sheet.rel = "stylesheet";
    sheet.href = form.getAttribute("data-expr-css");
    root.appendChild(sheet);
    textarea.insertAdjacentElement("beforebegin", host);
    // The server checks the field on save; a hidden required textarea would block the submit silently.
    textarea.required = false;
    textarea.classList.add("expr-enhanced");

    const label = textarea.id ? form.querySelector('label[for="' + CSS.escape(textarea.id) + '"]') : null;
    const content = { spellcheck: "false", autocapitalize: "off", autocorrect: "off", "aria-required": "true" };
    // The editor lives in a shadow root, where aria-labelledby cannot reach the page's <label>: copy its text.
    if (label) content["aria-label"] = label.textContent.trim();

    const view = new CM.EditorView({
      root: root,
      parent: root,
      state: CM.EditorState.create({
        doc: textarea.value,
        extensions: [
          replaceSelectionInput,
          CM.history(),
          CM.drawSelection(),
          CM.highlightSpecialChars(),
          CM.bracketMatching(),
          CM.closeBrackets(),
          CM.python(),
          CM.syntaxHighlighting(CM.classHighlighter),
          CM.syntaxHighlighting(
            CM.tagHighlighter([{ tag: CM.tags.function(CM.tags.variableName), class: "tok-function" }]),
          ),
          CM.autocompletion({ override: [completionSource(field, vocabulary)] }),
          expressionLinter(form, field),
          CM.lintGutter(),
          CM.keymap.of([
            ...CM.closeBracketsKeymap,
            ...CM.defaultKeymap,
            ...CM.historyKeymap,
            ...CM.completionKeymap,
            ...CM.lintKeymap,
          ]),
          CM.EditorView.lineWrapping,
          CM.EditorView.contentAttributes.of(content),
          CM.EditorView.updateListener.of(function (update) {
            if (!update.docChanged) return;
            if (update.transactions.every((tr) => tr.isUserEvent(SYNC))) return;
            textarea.value = update.state.doc.toString();
            textarea.dispatchEvent(new Event("input", { bubbles: true }));
          }),
        ],
      }),
    });

    textarea.addEventListener("input", function () {
      const text = view.state.doc.toString();
      if (textarea.value === text) return;
      view.dispatch({ changes: { from: 0, to: text.length, insert: textarea.value }, userEvent: SYNC });
    });
    if (label) {
      label.addEventListener("click", function (event) {
        event.preventDefault();
        view.focus();
      });
    }
  }

  function enhanceIn(element) {
    if (!element || !element.querySelectorAll) return;
    if (element.matches && element.matches("textarea[data-expr-editor]")) enhance(element);
    element.querySelectorAll("textarea[data-expr-editor]").forEach(enhance);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", () => enhanceIn(document.body));
  } else {
    enhanceIn(document.body);
  }
  document.addEventListener("htmx:load", (event) => enhanceIn(event.target));
})();
