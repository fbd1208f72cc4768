// Entry of rules/static/rules/vendor/codemirror/editor.bundle.js: the parts of CodeMirror 6 that the
// expression editor's glue (rules/static/rules/js/expr-editor.js) uses, as one global, window.LlamonCM.
// Rebuild with `make editor-bundle` (see README.md in the bundle's directory).
import { EditorState, Compartment } from "@codemirror/state";
import {
  EditorView,
  keymap,
  drawSelection,
  highlightActiveLine,
  highlightSpecialChars,
  placeholder,
} from "@codemirror/view";
import { defaultKeymap, history, historyKeymap } from "@codemirror/commands";
import { syntaxHighlighting, bracketMatching, syntaxTree } from "@codemirror/language";
import { python } from "@codemirror/lang-python";
import {
  autocompletion,
  completionKeymap,
  closeBrackets,
  closeBracketsKeymap,
  snippetCompletion,
} from "@codemirror/autocomplete";
import { linter, lintGutter, lintKeymap, forceLinting } from "@codemirror/lint";
import { classHighlighter, tagHighlighter, tags } from "@lezer/highlight";

window.LlamonCM = Object.freeze({
  EditorState,
  Compartment,
  EditorView,
  keymap,
  drawSelection,
  highlightActiveLine,
  highlightSpecialChars,
  placeholder,
  defaultKeymap,
  history,
  historyKeymap,
  syntaxHighlighting,
  bracketMatching,
  syntaxTree,
  python,
  autocompletion,
  completionKeymap,
  closeBrackets,
  closeBracketsKeymap,
  snippetCompletion,
  linter,
  lintGutter,
  lintKeymap,
  forceLinting,
  classHighlighter,
  tagHighlighter,
  tags,
});
