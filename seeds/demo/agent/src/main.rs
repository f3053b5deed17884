//! The demo seed's agent, a WASI command component (`wasm32-wasip2`).
//!
//! It answers a task of the demo task set, "predict y for x = …", with the line
//! `y = slope * x + intercept`, whose two parameters it reads from `params.json` in its
//! own directory. That file is the only thing the demo experiment evolves.
//!
//! * instruction: `EVOLVE_INSTRUCTION`, else stdin; the first line of the form `x = <number>`;
//! * parameters: `$EVOLVE_AGENT_DIR/params.json` (`/agent` when unset: the local engine
//!   preopens the agent's directory there, read-only), a flat JSON object with numeric
//!   `slope` and `intercept`;
//! * answer: `$EVOLVE_APP_DIR/answer.txt` (`/app` when unset), one number.
//!
//! It prints what it did (the trial's `agent/agent.txt`) and exits 2 on a missing input.

use std::io::Read;
use std::process::ExitCode;

fn main() -> ExitCode {
    match run() {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("demo agent: {e}");
            ExitCode::from(2)
        }
    }
}

fn run() -> Result<String, String> {
    let instruction = match std::env::var("EVOLVE_INSTRUCTION") {
        Ok(s) => s,
        Err(_) => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .map_err(|e| format!("cannot read the instruction from stdin: {e}"))?;
            s
        }
    };
    let x = input_x(&instruction).ok_or("the instruction has no line `x = <number>`")?;

    let dir = std::env::var("EVOLVE_AGENT_DIR").unwrap_or_else(|_| "/agent".into());
    let params_path = format!("{}/params.json", dir.trim_end_matches('/'));
    let params = std::fs::read_to_string(&params_path)
        .map_err(|e| format!("cannot read {params_path}: {e}"))?;
    let slope = number_field(&params, "slope").map_err(|e| format!("{params_path}: {e}"))?;
    let intercept =
        number_field(&params, "intercept").map_err(|e| format!("{params_path}: {e}"))?;

    let y = slope * x + intercept;
    let app = std::env::var("EVOLVE_APP_DIR").unwrap_or_else(|_| "/app".into());
    let answer_path = format!("{}/answer.txt", app.trim_end_matches('/'));
    std::fs::write(&answer_path, format!("{y}\n"))
        .map_err(|e| format!("cannot write {answer_path}: {e}"))?;
    Ok(format!(
        "x = {x}, slope = {slope}, intercept = {intercept}: wrote y = {y} to {answer_path}"
    ))
}

/// The number on the first line that reads `x = <number>` (spaces optional).
fn input_x(instruction: &str) -> Option<f64> {
    instruction.lines().find_map(|line| {
        let rest = line.trim().strip_prefix('x')?.trim_start();
        rest.strip_prefix('=')?.trim().parse::<f64>().ok()
    })
}

/// The numeric value of the top-level key `name` in a flat JSON object such as
/// `{"slope": 1.0, "intercept": 0.0}` (what `mutate/perturb` writes).
fn number_field(json: &str, name: &str) -> Result<f64, String> {
    let key = format!("\"{name}\"");
    let mut from = 0;
    while let Some(at) = json[from..].find(&key) {
        let after = &json[from + at + key.len()..];
        from += at + key.len();
        let Some(value) = after.trim_start().strip_prefix(':') else {
            continue; // the name appeared as a value, not as a key
        };
        let value = value.trim_start();
        let end = value
            .find(|c: char| !(c.is_ascii_digit() || matches!(c, '+' | '-' | '.' | 'e' | 'E')))
            .unwrap_or(value.len());
        return value[..end]
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("`{name}` is not a finite number"));
    }
    Err(format!("no numeric field `{name}`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_x_from_the_instruction() {
        assert_eq!(input_x("Predict y.\n\nx = 7\n"), Some(7.0));
        assert_eq!(input_x("x=-2.5"), Some(-2.5));
        assert_eq!(input_x("y = 3\nx = 1e1\n"), Some(10.0));
        assert_eq!(input_x("no input here"), None);
        assert_eq!(input_x("x = seven"), None);
    }

    #[test]
    fn reads_numeric_fields() {
        let p = "{\n  \"note\": \"slope\",\n  \"slope\": 1.734,\n  \"intercept\": -2e-3\n}\n";
        assert_eq!(number_field(p, "slope"), Ok(1.734));
        assert_eq!(number_field(p, "intercept"), Ok(-0.002));
        assert_eq!(
            number_field(p, "bias"),
            Err("no numeric field `bias`".into())
        );
        assert_eq!(
            number_field("{\"slope\": \"steep\"}", "slope"),
            Err("`slope` is not a finite number".into())
        );
    }
}
