package main

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// The bash and zsh scripts are urfave/cli v2's autocomplete scripts
// (autocomplete/bash_autocomplete, autocomplete/zsh_autocomplete, MIT) with
// the program name filled in: they ask the binary itself for candidates
// ("hamaster ... --generate-bash-completion"), so completion always matches
// the binary's commands and flags. Fish gets urfave/cli's generated script.
const bashCompletion = `# bash completion for hamaster: source <(hamaster completion bash)
_hamaster_init_completion() {
  COMPREPLY=()
  _get_comp_words_by_ref "$@" cur prev words cword
}

_hamaster_bash_autocomplete() {
  if [[ "${COMP_WORDS[0]}" != "source" ]]; then
    local cur opts base words
    COMPREPLY=()
    cur="${COMP_WORDS[COMP_CWORD]}"
    if declare -F _init_completion >/dev/null 2>&1; then
      _init_completion -n "=:" || return
    else
      _hamaster_init_completion -n "=:" || return
    fi
    words=("${words[@]:0:$cword}")
    if [[ "$cur" == "-"* ]]; then
      requestComp="${words[*]} ${cur} --generate-bash-completion"
    else
      requestComp="${words[*]} --generate-bash-completion"
    fi
    opts=$(eval "${requestComp}" 2>/dev/null)
    COMPREPLY=($(compgen -W "${opts}" -- ${cur}))
    return 0
  fi
}

complete -o bashdefault -o default -o nospace -F _hamaster_bash_autocomplete hamaster
`

const zshCompletion = `#compdef hamaster
# zsh completion for hamaster: hamaster completion zsh > "${fpath[1]}/_hamaster"

_hamaster_zsh_autocomplete() {
  local -a opts
  local cur
  cur=${words[-1]}
  if [[ "$cur" == "-"* ]]; then
    opts=("${(@f)$(${words[@]:0:#words[@]-1} ${cur} --generate-bash-completion)}")
  else
    opts=("${(@f)$(${words[@]:0:#words[@]-1} --generate-bash-completion)}")
  fi

  if [[ "${opts[1]}" != "" ]]; then
    _describe 'values' opts
  else
    _files
  fi
}

compdef _hamaster_zsh_autocomplete hamaster
`

func completionCommand(e *env, g *globals) *cli.Command {
	return &cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script (bash, zsh or fish)",
		ArgsUsage: "bash|zsh|fish",
		Description: `Examples:
  source <(hamaster completion bash)           # or put it in ~/.bashrc
  hamaster completion zsh > _hamaster          # then move it into a directory of $fpath
  hamaster completion fish > hamaster.fish     # then into ~/.config/fish/completions/`,
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				return usageErr("completion: want one shell: bash, zsh or fish")
			}
			var script string
			switch sh := c.Args().First(); sh {
			case "bash":
				script = bashCompletion
			case "zsh":
				script = zshCompletion
			case "fish":
				s, err := c.App.ToFishCompletion()
				if err != nil {
					return fmt.Errorf("completion fish: %w", err)
				}
				script = s
			default:
				return usageErr("completion: unknown shell %q (valid: bash, zsh, fish)", sh)
			}
			_, err := fmt.Fprint(e.stdout, script)
			return err
		},
	}
}

// manCommand prints the man page generated from the commands (make man).
func manCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:   "man",
		Usage:  "print hamaster(1), the man page generated from the commands",
		Hidden: true,
		Action: func(c *cli.Context) error {
			s, err := c.App.ToManWithSection(1)
			if err != nil {
				return fmt.Errorf("man page: %w", err)
			}
			_, err = fmt.Fprint(e.stdout, s)
			return err
		},
	}
}
