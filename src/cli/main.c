/* main: the dspark command line: looks up the command, parses its flags
 * and hands over. The commands live in cli_*.c; only they print errors and
 * exit. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "engine/cpu.h"
#include "spec/registry.h"

static const char MAIN_HELP[] =
    "dspark " DSPARK_VERSION " - LLM inference with lossless speculative decoding\n"
    "usage: dspark COMMAND [options]   (dspark COMMAND --help for details)\n"
    "commands:\n"
    "  run         generate a completion for a prompt (raw, or --chat through the template)\n"
    "  chat        interactive chat with the model's chat template\n"
    "  logits      write the logits of every prompt position to a file\n"
    "  tokenize    print token ids of a text\n"
    "  detokenize  print the text of token ids\n"
    "  template    print the prompt a chat template renders for a conversation\n"
    "  bench       decode speed of each decoding mode on fixed prompts, and a lossless check\n"
    "  serve       HTTP server: OpenAI (chat, completions, responses) and Anthropic (messages) APIs\n"
    "  claude      start Claude Code against a running dspark server\n"
    "  quantize    write a quantized copy of a checkpoint: GGUF (Q8_0 .. Q4_K_M) or MLX (4/8-bit)\n"
    "  pull        download a model (and its drafters) from the Hugging Face hub into its cache\n"
    "  doctor      what this machine and build offer, where models are looked for, what fits (--json)\n"
    "  models      the registered targets, their builds and drafters, downloaded and fitting\n"
    "  version     print version and CPU features\n"
    "--model and --drafter take a folder, a .gguf file, or a Hugging Face id ORG/NAME[@REVISION]\n"
    "(looked up in DSPARK_MODEL_DIRS, the Hugging Face cache and LM Studio's folders: dspark doctor\n"
    "lists them); every command that opens a model accepts --trust-remote-code.\n";

#define SAMPLING " --mmap --device --kv-bits --tensor-parallel --temp --top-k --top-p --min-p --seed --threads -t --context-window -c -n --n-predict "
#define SPEC " --mode --drafter --max-draft --confidence-threshold --no-lookup-drafts "
#define TEMPLATE_VARS " --var --no-thinking --system "
#define PULL " --pull --no-drafters --revision --include "

typedef struct {
    const char *name;
    int (*fn)(const opts *o);
    const char *help;
    const char *flags; /* accepted options, space-separated and padded */
    int client;        /* 1: talks to a server: loads no model, and the arguments
                          after "--" go to the program it starts; 2: loads no model */
} command;

static const command COMMANDS[] = {
    {"run", cmd_run, RUN_HELP,
     " --model -m --prompt -p --prompt-ids --print-ids --ignore-eos --chat --no-warmup" SPEC SAMPLING TEMPLATE_VARS PULL, 0},
    {"chat", cmd_chat, CHAT_HELP, " --model -m" SPEC SAMPLING TEMPLATE_VARS PULL, 0},
    {"logits", cmd_logits, LOGITS_HELP,
     " --model -m --prompt-ids --out -o --threads -t --context-window -c --mmap --device --kv-bits --tensor-parallel ", 0},
    {"tokenize", cmd_tokenize, TOKENIZE_HELP, " --model -m --file -f --jsonl --add-special ", 0},
    {"detokenize", cmd_detokenize, DETOKENIZE_HELP, " --model -m --skip-special ", 0},
    {"template", cmd_template, TEMPLATE_HELP,
     " --model -m --messages --tools --no-generation-prompt" TEMPLATE_VARS, 0},
    {"bench", cmd_bench, BENCH_HELP,
     " --model -m --drafter --modes --trials --json --prompt-ids --max-draft --confidence-threshold --no-lookup-drafts"
     " --threads -t --context-window -c -n --n-predict --mmap --device --kv-bits --tensor-parallel ", 0},
    {"serve", cmd_serve, SERVE_HELP,
     " --model -m --host --port --api-key --context-window -c --threads -t --mmap --device --kv-bits --tensor-parallel"
     " --no-thinking"
     " --cache-slots --max-batch --cache-ram --kv-ram --drain-timeout"
     " --reasoning-effort --no-warmup"
     SPEC PULL " --temp --top-k --top-p --min-p --seed -n --n-predict ", 0},
    {"claude", cmd_claude, CLAUDE_HELP, " --url --api-key --print-env ", 1},
    {"quantize", cmd_quantize, QUANTIZE_HELP, " --model -m --out -o --type --group-size --threads -t ", 0},
    {"pull", cmd_pull, PULL_HELP, " --revision --include --no-drafters ", 0},
    {"doctor", cmd_doctor, DOCTOR_HELP, " --json --models ", 2},
    {"models", cmd_models, MODELS_HELP, " --json ", 2},
};

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        fputs(MAIN_HELP, stdout);
        return argc < 2 ? 1 : 0;
    }
    const char *cmd = argv[1];
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++) {
        const command *c = &COMMANDS[i];
        if (strcmp(cmd, c->name)) continue;
        opts o;
        int n = argc - 2, rest = 0; /* where the arguments after "--" start */
        for (int j = 2; j < argc; j++)
            if (!strcmp(argv[j], "--")) {
                n = j - 2;
                rest = j + 1;
                break;
            }
        cli_parse(&o, n, argv + 2, c->name, c->flags);
        if (rest && c->client == 1) {
            o.rest = argv + rest;
            o.n_rest = argc - rest;
        } else if (rest) { /* elsewhere "--" ends the options: TEXT may then start with '-' */
            for (int j = rest; j < argc; j++) {
                if (o.text) cli_die("%s: unexpected argument \"%s\" (see dspark %s --help)", c->name, argv[j], c->name);
                o.text = argv[j];
            }
        }
        if (o.help) {
            fputs(c->help, stdout);
            return 0;
        }
        static char def[4096];
        /* (pull names its model as an argument: no default) */
        if (!o.model && !c->client && c->fn != cmd_pull) {
            if (!registry_default_model(def, sizeof def))
                cli_die("%s: --model is required: the bundled model %s was not found beside the dspark binary "
                        "(models/%s) and DSPARK_MODEL is not set",
                        c->name, DSPARK_DEFAULT_MODEL, DSPARK_DEFAULT_MODEL);
            o.model = def;
        }
        if (!c->client && c->fn != cmd_pull) {
            const char *given = o.model;
            if (o.pull) cli_pull_args(&o); /* ids found nowhere on this machine are pulled first */
            cli_resolve_models(&o);
            o.model_spec = given;
        }
        return c->fn(&o);
    }
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("dspark %s\ncpu: %s, %d threads, avx2+fma+f16c: %s, avx512: %s\n", DSPARK_VERSION, cpu_name(),
               cpu_count(), cpu_has_avx2() ? "yes" : "no", cpu_has_avx512() ? "yes" : "no");
        return 0;
    }
    fprintf(stderr, "dspark: unknown command \"%s\"\n%s", cmd, MAIN_HELP);
    return 1;
}
